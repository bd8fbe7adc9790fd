(ns jepsen.nemesis
  "STAND-IN for Jepsen 0.3.x's jepsen.nemesis (the bridge's tests only): the Nemesis and
  Reflection protocols with Jepsen's signatures.")

(defprotocol Nemesis
  (setup! [this test] "Set up the nemesis; returns it ready to be invoked.")
  (invoke! [this test op] "Apply an operation to the nemesis, which alters the cluster.")
  (teardown! [this test] "Tear down the nemesis when work is complete."))

(defprotocol Reflection
  "Optional protocol for reflecting on nemeses."
  (fs [this] "What :f functions does this nemesis support? Returns a set."))
