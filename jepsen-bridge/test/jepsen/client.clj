(ns jepsen.client
  "STAND-IN for Jepsen 0.3.x's jepsen.client (the bridge's tests only): the Client and
  Reusable protocols with Jepsen's signatures, and is-reusable?.")

(defprotocol Client
  (open! [client test node] "Returns a client bound to node.")
  (setup! [client test] "Sets up the database state the client needs.")
  (invoke! [client test operation] "Applies an operation; returns its completion.")
  (teardown! [client test] "Tears down what setup! made.")
  (close! [client test] "Closes the client's connection."))

(defprotocol Reusable
  (reusable? [client test] "Can this client be re-used after a crashed invocation?"))

(defn is-reusable?
  "reusable?, false when the client does not implement Reusable."
  [client test]
  (boolean (and (satisfies? Reusable client) (reusable? client test))))
