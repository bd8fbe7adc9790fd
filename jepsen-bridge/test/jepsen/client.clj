(ns jepsen.client
  "STAND-IN for Jepsen 0.3.x's jepsen.client (the bridge's tests only): the Client protocol
  with Jepsen's signatures.")

(defprotocol Client
  (open! [client test node] "Returns a client bound to node.")
  (setup! [client test] "Sets up the database state the client needs.")
  (invoke! [client test operation] "Applies an operation; returns its completion.")
  (teardown! [client test] "Tears down what setup! made.")
  (close! [client test] "Closes the client's connection."))
