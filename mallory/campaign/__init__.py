"""The campaign: its configuration (`config`), the observe-orient-decide-act loop (`loop`),
its directory (`directory`), the checks after each schedule (`checks`), the live parts a
campaign runs on (`live`: an observed cluster, the SUT, the nemesis; `observed`,
`netns_stack`, `docker_stack`) and the status screen (`status`). Imports the mediator,
harness, nemesis and cluster; nothing below imports it."""
