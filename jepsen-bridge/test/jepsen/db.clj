(ns jepsen.db
  "STAND-IN for Jepsen 0.3.x's jepsen.db (the bridge's tests only): the protocols a DB may
  implement, with Jepsen's names and signatures. As in Jepsen, jepsen.db/Process is the Kill
  protocol under a second name (java.lang.Process shadows the name, so it is unmapped first).")

(defprotocol DB
  (setup! [db test node] "Set up the database on this node.")
  (teardown! [db test node] "Tear down the database on this node."))

(defprotocol Kill
  "Optional: starting and killing a DB's processes."
  (kill! [db test node] "Forcibly kills the process.")
  (start! [db test node] "Starts the process."))

(ns-unmap *ns* 'Process)
(def Process Kill)

(defprotocol Pause
  "Optional: pausing and resuming a DB's processes."
  (pause! [db test node] "Pauses the process.")
  (resume! [db test node] "Resumes the process."))

(defprotocol Primary
  "Optional: DBs with primary nodes."
  (primaries [db test] "The nodes which are currently primaries.")
  (setup-primary! [db test node] "One-time setup on a single node."))
