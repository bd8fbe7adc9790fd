(ns jepsen.tests
  "STAND-IN for Jepsen's jepsen.tests (the bridge's tests only).")

(def noop-test {:name "noop", :nodes ["n1" "n2" "n3" "n4" "n5"], :concurrency 5})
