"""One replay of a candidate schedule on a fresh cluster: the live side of the shrink.

Each replay is its own campaign directory under `work/replays/NNNN/` (the cluster, the
SUT, the workload and the checks exactly as `mallory replay` builds them), holding the
schedule record and, when the bug came back, its bundle.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from mallory.campaign.config import CampaignConfig
from mallory.campaign.directory import CampaignDir
from mallory.campaign.live import replay_script
from mallory.campaign.loop import ScriptedStep


class LiveReplay:
    def __init__(self, config: CampaignConfig, seed: int | None, signature: str, work: Path) -> None:
        self.config = config
        self.seed = seed
        self.signature = signature
        self.replays_dir = Path(work) / "replays"

    def _fresh_dir(self) -> CampaignDir:
        """The next unused number: a replay cut short by Ctrl-C keeps its directory (it was
        never journaled) and the next one goes beside it."""
        self.replays_dir.mkdir(parents=True, exist_ok=True)
        taken = [int(p.name) for p in self.replays_dir.iterdir() if p.name.isdigit()]
        return CampaignDir(self.replays_dir / f"{max(taken, default=0) + 1:04d}")

    def __call__(self, candidate: list[ScriptedStep]) -> tuple[bool, str | None]:
        directory = self._fresh_dir()
        record = replay_script(self.config, directory, "sh" + secrets.token_hex(3), list(candidate), self.seed)
        return self.signature in record.get("findings", []), str(directory.root)
