(defproject mallory/jepsen-bridge "0.1.0"
  :description "Makes a stock Jepsen 0.3.x test ask Mallory's mediator for its next fault"
  :license {:name "Apache-2.0" :url "https://www.apache.org/licenses/LICENSE-2.0"}
  :dependencies [[org.clojure/clojure "1.11.1"]]
  ;; Jepsen comes from the test that uses the bridge; the bridge only compiles against it.
  :profiles {:provided {:dependencies [[jepsen "0.3.5"]]}
             ;; the bridge's own tests run without Jepsen, against the stand-ins in test/
             :test {:test-paths ["test"]}}
  :source-paths ["src"])
