(ns mallory.jepsen.generator-test
  "mallory.jepsen against STAND-INS of Jepsen's namespaces (test/jepsen/, Jepsen's jars
  cannot be fetched here) and a LIVE mediator: the catalogue derived from the standard
  packages, the adaptive generator driven the way Jepsen's interpreter drives a generator
  (op, then update with the invocation and the completion), the final generator run by
  mallory.jepsen.interpreter, and the client wrapper. (combinators_test.clj runs the
  README's wiring, and holds the :db gating and file-corruption draws.)

  Run by tests/live/jepsen_bridge/test_generator.py with MALLORY_URL and MALLORY_TOKEN; it
  checks the mediator against the last line printed here (EDN {:actions [...] :catalogue
  [...]}). Exit status 0 iff every assertion held."
  (:require [clojure.test :refer [deftest is testing] :as t]
            [jepsen.client :as client]
            [jepsen.db :as db]
            [jepsen.generator :as gen]
            [jepsen.nemesis :as n]
            [jepsen.nemesis.combined :as nc]
            [mallory.jepsen :as mallory]
            [mallory.jepsen.interpreter :as interpreter]
            [mallory.jepsen.mediator :as m]))

(def url (System/getenv "MALLORY_URL"))
(def token (System/getenv "MALLORY_TOKEN"))
(def nodes ["n1" "n2" "n3" "n4" "n5"])
(def a-test {:name "mallory-generator-test", :nodes nodes})
(def killable
  "A DB whose processes can be killed and started (jepsen.db/Process), not paused."
  (reify
    db/DB (setup! [_ _ _]) (teardown! [_ _ _])
    db/Process (kill! [_ _ _]) (start! [_ _ _])))
(def opts {:db        killable
           :faults    [:partition :kill :clock]
           :partition {:targets [:majority :one]}
           :kill      {:targets [:one :all]}
           :clock     {:targets [:all]}
           :mallory   {:window-ms 300}})
(def expected-catalogue
  ["start-partition:majority" "start-partition:one" "stop-partition"
   "bump-clock:all" "strobe-clock:all" "reset-clock:all"
   "kill:one" "kill:all" "start:all"])
(def result (atom {}))

(defn- thrown-data [f]
  (try (f) nil (catch clojure.lang.ExceptionInfo e (assoc (ex-data e) :message (ex-message e)))))

(defn- op-fn [actions action] (some (fn [[a f]] (when (= a action) f)) actions))

(deftest the-catalogue-comes-from-the-enabled-packages-perf-and-targets
  (let [actions (mallory/catalogue opts (nc/nemesis-packages opts))]
    (is (= expected-catalogue (map first actions)))
    (testing "each action is the op it names"
      (is (= {:type :info, :f :start-partition, :value :majority}
             ((op-fn actions "start-partition:majority") a-test)))
      (is (= {:type :info, :f :stop-partition, :value nil} ((op-fn actions "stop-partition") a-test)))
      (is (= {:type :info, :f :kill, :value :one} ((op-fn actions "kill:one") a-test)))
      (is (= {:type :info, :f :start, :value :all} ((op-fn actions "start:all") a-test)))
      (is (= {:type :info, :f :reset-clock, :value nodes} ((op-fn actions "reset-clock:all") a-test)))
      (let [bump ((op-fn actions "bump-clock:all") a-test)]
        (is (= [:info :bump-clock (set nodes)] [(:type bump) (:f bump) (set (keys (:value bump)))]))
        (is (every? #(and (integer? %) (not (zero? %))) (vals (:value bump))))))
    (testing "packet behaviours and file corruptions are part of the target"
      (let [o {:faults [:packet :file-corruption]
               :packet {:targets [:one :all] :behaviors [{} {:delay {}, :duplicate {}}]}
               :file-corruption {:targets [:one]
                                 :corruptions [{:type :bitflip, :file "/db", :probability 1e-3}
                                               {:type :truncate, :file "/wal", :drop 10}]}}
            actions (mallory/catalogue o (nc/nemesis-packages o))]
        (is (= ["start-packet:one:none" "start-packet:one:delay+duplicate" "start-packet:all:none"
                "start-packet:all:delay+duplicate" "stop-packet" "bitflip:one:/db" "truncate:one:/wal"]
               (map first actions)))
        (is (= {:type :info, :f :start-packet, :value [:all {:delay {}, :duplicate {}}]}
               ((op-fn actions "start-packet:all:delay+duplicate") a-test)))
        (is (= {:type :info, :f :truncate, :value [:one {:file "/wal", :drop 10}]}
               ((op-fn actions "truncate:one:/wal") a-test)))))
    (testing "a package of one's own: the fs of its :perf, else those its nemesis reflects"
      (let [mine   {:generator [:mine], :perf #{{:name "mine", :start #{:flip}, :stop #{:flop}}}}
            silent {:generator [:silent], :nemesis :no-reflection}
            reflecting {:generator [:reflecting]
                        :nemesis (reify n/Reflection (fs [_] #{:zap :zip}))}
            actions (mallory/catalogue {:faults []} [mine silent reflecting])]
        (is (= ["flip" "flop" "zap" "zip"] (map first actions)))
        (is (= {:type :info, :f :zap, :value nil} ((op-fn actions "zap") a-test)))))
    (testing "two different ops under one name: a clear error"
      (let [o {:faults [:packet], :packet {:targets [:one], :behaviors [{:delay {:time 5}} {:delay {:time 50}}]}}]
        (is (= ["start-packet:one:delay"]
               (:actions (thrown-data #(mallory/catalogue o (nc/nemesis-packages o))))))))
    (testing "no enabled fault: a clear error, not an empty catalogue"
      (is (= ::mallory/empty-catalogue
             (:type (thrown-data #(mallory/catalogue {:faults []} (nc/nemesis-packages {:faults []}))))))))
  (testing "the package: stock nemesis, Mallory's generator, heal-everything final generator"
    (let [conn     (m/connect {:url url :token token})
          packages (nc/nemesis-packages opts)
          pkg      (mallory/nemesis-package conn opts packages)]
      (is (= expected-catalogue (:mallory/catalogue pkg)))
      (is (instance? mallory.jepsen.AdaptiveGenerator (:generator pkg)))
      (is (= [:stand-in :compose [:partition-nemesis :packet-nemesis :file-corruption-nemesis
                                  :clock-nemesis :db-nemesis]]
             (:nemesis pkg)))
      (is (= (keep :final-generator (filter :generator packages))
             (butlast (:final-generator pkg)))
          "every enabled package's own final generator, in order")
      (is (instance? mallory.jepsen.EndTest (:gen (last (:final-generator pkg))))
          "then the end of the test, once the nemesis is free")
      (m/close! conn))))

;; -- driving the generator as Jepsen's interpreter does ------------------------------------

(def t0 (System/nanoTime))
(defn- now [] (- (System/nanoTime) t0))
(defn- ctx
  ([t] (ctx t true))
  ([t free?] {:time t, :free-threads (if free? #{:nemesis} #{}), :workers {:nemesis :nemesis}}))

(defn- poll-op
  "Asks `g` for an op until it is not :pending (the interpreter waits at most 1 ms between
  asks; we wait 5). Returns [op gen' pendings]."
  [g]
  (let [deadline (+ (System/currentTimeMillis) 30000)]
    (loop [pendings 0]
      (let [[op g' :as res] (gen/op g a-test (ctx (now)))]
        (cond
          (nil? res) (throw (ex-info "the generator ended" {}))
          (not= :pending op) [op g' pendings]
          (> (System/currentTimeMillis) deadline) (throw (ex-info "no op within 30 s" {}))
          :else (do (is (identical? g g') ":pending returns the same generator")
                    (Thread/sleep 5)
                    (recur (inc pendings))))))))

(defn- asks [conn] (get-in (m/status conn) [:advisor :requests]))

(deftest the-generator-asks-the-mediator-and-emits-jepsen-nemesis-ops
  (let [conn    (m/connect {:url url :token token})
        pkg     (mallory/nemesis-package conn opts (nc/nemesis-packages opts))
        actions (mallory/catalogue opts (nc/nemesis-packages opts))]
    (loop [g (:generator pkg), round 0, chosen []]
      (if (= round 3)
        (swap! result assoc :actions chosen)
        (let [[op g' pendings] (poll-op g)
              action (:action (:awaiting g'))
              model  ((op-fn actions action) a-test)]
          (testing (str "round " round ": " action)
            (is (= (inc round) (asks conn)) "one ask per fault")
            (when (zero? round) (is (pos? pendings) "pending while the mediator decides"))
            (is (= :info (:type op)))
            (is (= :nemesis (:process op)))
            (is (number? (:time op)))
            (is (= (:f model) (:f op)))
            (if (#{:bump-clock :strobe-clock} (:f op))
              (is (= (set nodes) (set (keys (:value op)))))
              (is (= (:value model) (:value op))))
            (testing "asking again is pure: same op, no new request; a busy nemesis waits"
              (is (= op (first (gen/op g a-test (ctx (:time op))))))
              (is (= [:pending g] (gen/op g a-test (ctx (now) false))))
              (is (= (inc round) (asks conn)))))
          (let [invoked (gen/update g' a-test (ctx (now) false) (assoc op :index (* 2 round)))
                _       (is (= [:pending invoked] (gen/op invoked a-test (ctx (now)))) "running: pending")
                _       (is (identical? invoked (gen/update invoked a-test (ctx (now))
                                                            {:type :ok, :process 3, :f :read, :time (now)}))
                            "client events leave it alone")
                done-at (now)
                done    (gen/update invoked a-test (ctx done-at) (assoc op :time done-at :index (inc (* 2 round))))]
            (testing "the window after a completed fault: pending, and no ask"
              (is (= done-at (:opened-at done)))
              (is (= [:pending done] (gen/op done a-test (ctx (+ done-at 100000000)))))
              (is (nil? @(:ask done)))
              (is (= (inc round) (asks conn))))
            (recur done (inc round) (conj chosen action))))))
    (is (= 3 (m/await-reports conn)) "every completed fault reported")
    (testing "the final generator heals, then ends the test on the mediator once every heal is done"
      (let [on-during (atom [])
            history   (interpreter/run! a-test (gen/nemesis (:final-generator pkg))
                                        {:invoke-nemesis (fn [_ op]
                                                           (swap! on-during conj (some? (:test (m/status conn))))
                                                           (assoc op :type :info))})
            invokes   (filter #(= :invoke (:type %)) history)]
        (is (empty? invokes) "nemesis ops are :info, never :invoke")
        (is (= [[:stop-partition nil] [:stop-partition nil] [:reset-clock nodes] [:reset-clock nodes]
                [:start :all] [:start :all]]
               (map (juxt :f :value) history))
            "each heal invoked and completed in turn")
        (is (every? #(= [:info :nemesis] [(:type %) (:process %)]) history))
        (is (= [true true true] @on-during) "the mediator's test was still on as each heal ran")
        (is (nil? (:test (m/status conn))) "the mediator's test has ended")
        (is (= 3 (get-in (m/status conn) [:advisor :requests])))))
    (swap! result assoc :catalogue (:mallory/catalogue pkg))
    (m/close! conn)))

;; -- the client wrapper ---------------------------------------------------------------------

(defrecord FakeClient [node log]
  ;; a fake inner client (this test only): :boom throws, anything else succeeds
  client/Client
  (open! [this test node] (swap! log conj [:open node]) (->FakeClient node log))
  (setup! [this test] (swap! log conj [:setup node]))
  (invoke! [this test op]
    (if (= :boom (:f op)) (throw (RuntimeException. "boom")) (assoc op :type :ok, :value 1)))
  (teardown! [this test] (swap! log conj [:teardown node]))
  (close! [this test] (swap! log conj [:close node]))
  client/Reusable
  (reusable? [this test] true))

(deftest the-client-wrapper-relays-every-invocation-and-completion
  (let [conn (m/connect {:url url :token token})
        log  (atom [])
        c    (client/open! (mallory/client conn (->FakeClient nil log)) a-test "n1")]
    (client/setup! c a-test)
    (is (true? (client/is-reusable? c a-test)) "reusable as the wrapped client is")
    (is (= {:type :ok, :process 3, :f :write, :value 1}
           (client/invoke! c a-test {:type :invoke, :process 3, :f :write, :value 1})))
    (is (thrown-with-msg? RuntimeException #"boom"
                          (client/invoke! c a-test {:type :invoke, :process 3, :f :boom})))
    (client/teardown! c a-test)
    (client/close! c a-test)
    (is (= [[:open "n1"] [:setup "n1"] [:teardown "n1"] [:close "n1"]] @log))
    (m/flush! conn)
    (is (= {:queued 4, :sent 4, :dropped 0, :failed 0, :last-error nil} (m/relay-stats conn)))
    (m/close! conn)))

(let [counters (binding [t/*test-out* *err*
                         t/*report-counters* (ref t/*initial-report-counters*)]
                 (t/test-vars [#'the-catalogue-comes-from-the-enabled-packages-perf-and-targets
                               #'the-generator-asks-the-mediator-and-emits-jepsen-nemesis-ops
                               #'the-client-wrapper-relays-every-invocation-and-completion])
                 (binding [*out* *err*] (println "counters" @t/*report-counters*))
                 @t/*report-counters*)]
  (println (pr-str @result))
  (shutdown-agents)
  (System/exit (if (t/successful? counters) 0 1)))
