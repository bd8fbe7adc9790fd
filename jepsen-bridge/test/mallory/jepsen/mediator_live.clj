(ns mallory.jepsen.mediator-live
  "Drives a LIVE mediator with mallory.jepsen.mediator, as a Jepsen test would: start,
  catalogue, rounds of relayed client ops each followed by a next-fault request and the
  fault's report, end. Also: a mediator that is down, one that never answers, a wrong
  token and a refused catalogue.

  Run by tests/live/jepsen_bridge/test_mediator.py, which starts the mediator and passes
  MALLORY_URL and MALLORY_TOKEN; it then checks the mediator's timeline and learner against
  the last line printed here, an EDN map {:rounds [...]}. Exit status 0 iff every
  clojure.test assertion held."
  (:require [clojure.test :refer [deftest is testing] :as t]
            [mallory.jepsen.mediator :as m])
  (:import (java.net InetAddress ServerSocket)))

(def url (System/getenv "MALLORY_URL"))
(def token (System/getenv "MALLORY_TOKEN"))
(def catalogue ["start-partition:majority" "kill:one" "pause:one" "stop-partition"])
(def rounds (atom []))

(defn- wait-until [pred timeout-ms what]
  (let [deadline (+ (System/currentTimeMillis) timeout-ms)]
    (loop []
      (or (pred)
          (if (< (System/currentTimeMillis) deadline)
            (do (Thread/sleep 10) (recur))
            (throw (ex-info (str "timed out waiting for " what) {})))))))

(defn- thrown-data [f]
  (try (f) nil (catch clojure.lang.ExceptionInfo e (assoc (ex-data e) :message (ex-message e)))))

(deftest a-mediator-that-is-down-is-named-in-the-error
  (let [port (with-open [s (ServerSocket. 0 1 (InetAddress/getLoopbackAddress))] (.getLocalPort s))
        dead (m/connect {:url (str "http://127.0.0.1:" port) :token "t" :timeout-ms 2000})
        e    (thrown-data #(m/start-test! dead "t"))]
    (is (= ::m/unreachable (:type e)))
    (is (re-find (re-pattern (str "mediator at http://127.0.0.1:" port " unreachable \\(/test/start\\)"))
                 (:message e)))
    (m/close! dead)))

(deftest a-mediator-that-never-answers-never-slows-the-relay
  ;; a socket that accepts connections and never answers: every request hangs until timeout
  (with-open [silent (ServerSocket. 0 50 (InetAddress/getLoopbackAddress))]
    (let [conn (m/connect {:url (str "http://127.0.0.1:" (.getLocalPort silent)) :token "t"
                           :timeout-ms 5000 :relay-capacity 100})
          t0   (System/nanoTime)
          kept (count (filter true? (for [i (range 1000)]
                                      (m/relay-op! conn {:process 1, :type :invoke, :f :write}))))
          ms   (/ (- (System/nanoTime) t0) 1e6)]
      ;; what a relay-op! costs is bench/bench_jepsen_relay.py's
      (testing "1000 relayed ops take less than one request's timeout: none waited for a request"
        (is (< ms 5000) (str "relaying took " ms " ms")))
      (testing "the bounded queue drops what does not fit, and counts it"
        (is (<= 100 kept 999))
        (is (= (- 1000 kept) (:dropped (m/relay-stats conn)))))
      (let [e (thrown-data #(m/status conn))]
        (is (= ::m/timeout (:type e)))
        (is (re-find #"did not answer /status within 5000 ms" (:message e))))
      (wait-until #(pos? (:failed (m/relay-stats conn))) 30000 "the hung batch to fail")
      (is (re-find #"did not answer /client/batch" (:last-error (m/relay-stats conn)))))))

(deftest a-wrong-token-and-a-bad-catalogue-are-refused-with-the-mediators-reason
  (let [wrong (m/connect {:url url :token "not-the-token"})
        e     (thrown-data #(m/status wrong))]
    (is (= [::m/rejected 401] [(:type e) (:status e)]))
    (is (re-find #"X-Mallory-Token" (:reason e)))
    (m/close! wrong))
  (let [conn (m/connect {:url url :token token})
        e    (thrown-data #(m/send-catalogue! conn []))]
    (is (= [::m/rejected 422] [(:type e) (:status e)]))
    (is (re-find #"1\.\.256 action names" (:message e)))
    (m/close! conn)))

(deftest a-short-test-end-to-end
  (let [conn (m/connect {:url url :token token})]
    (is (= "bridge-live" (get-in (m/start-test! conn "bridge-live") [:test :name])))
    (is (= {:actions catalogue} (m/send-catalogue! conn catalogue)))
    (dotimes [i 4]
      ;; a round of client ops, relayed by the background thread (not flushed by hand)
      (doseq [op [{:process 1, :type :invoke, :f (keyword (str "w" i))}
                  {:process 2, :type :invoke, :f (keyword (str "r" i))}
                  {:process 1, :type :ok, :f (keyword (str "w" i))}
                  {:process 2, :type :fail, :f (keyword (str "r" i))}]]
        (is (true? (m/relay-op! conn op))))
      (wait-until #(= (* 4 (inc i)) (:sent (m/relay-stats conn))) 10000 "the relay to post a round")
      (let [answer (m/next-fault! conn)]
        (is (some #{(:action answer)} catalogue))
        (is (false? (:late answer)) (pr-str answer))
        (is (= {:ok true} (m/report-fault! conn (:action answer))))
        (swap! rounds conj (select-keys answer [:action :window-ns :events :state :late]))))
    (let [ended (m/end-test! conn)]
      (is (= 4 (get-in ended [:advisor :requests])))
      (is (= "bridge-live" (get-in ended [:test :name]))))
    (is (= {:queued 16, :sent 16, :dropped 0, :failed 0, :last-error nil} (m/relay-stats conn)))
    (m/close! conn)))

(deftest concurrent-workers-and-flushes-keep-each-processs-order
  ;; after the end-to-end test: 4 workers relay 250 ops each while the caller flushes; the
  ;; mediator must get each process's ops in the order they were relayed (checked by pytest)
  (let [conn    (m/connect {:url url :token token :relay-interval-ms 5})
        workers (doall (for [p (range 10 14)]
                         (future (dotimes [k 250]
                                   (m/relay-op! conn {:process p, :type :invoke, :f (str "c" k)})))))]
    (dotimes [_ 20] (m/flush! conn) (Thread/sleep 2))
    (run! deref workers)
    (m/flush! conn)
    (is (= {:queued 1000, :sent 1000, :dropped 0, :failed 0, :last-error nil} (m/relay-stats conn)))
    (m/close! conn)))

(let [counters (binding [t/*test-out* *err*
                         t/*report-counters* (ref t/*initial-report-counters*)]
                 (t/test-vars [#'a-mediator-that-is-down-is-named-in-the-error
                               #'a-mediator-that-never-answers-never-slows-the-relay
                               #'a-wrong-token-and-a-bad-catalogue-are-refused-with-the-mediators-reason
                               #'a-short-test-end-to-end
                               #'concurrent-workers-and-flushes-keep-each-processs-order])
                 @t/*report-counters*)]
  (binding [*out* *err*] (println "clojure.test:" counters))
  (println (pr-str {:rounds @rounds}))
  (shutdown-agents)
  (System/exit (if (t/successful? counters) 0 1)))
