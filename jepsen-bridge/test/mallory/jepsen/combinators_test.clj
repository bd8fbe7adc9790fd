(ns mallory.jepsen.combinators-test
  "mallory.jepsen held to what Jepsen 0.3.x does (STAND-INS of Jepsen's namespaces in
  test/jepsen/ that behave like Jepsen's for what the bridge relies on, and a LIVE
  mediator):

  - the stand-in combinators run as Jepsen's do (so a bridge test composed with them
    means something);
  - kill and pause are offered only for a DB that can (jepsen.db/Process, jepsen.db/Pause),
    as Jepsen's db-package emits them;
  - file corruptions' :probability / :drop distribution maps are drawn for each op, as
    Jepsen's file-corruption package draws them, into the same op shape;
  - the README's wiring runs under the interpreter: the workload's ops on the clients,
    Mallory's faults on the nemesis, the time limit, then the heals, and the test ended on
    the mediator once they are done.

  Run by tests/live/jepsen_bridge/test_combinators.py with MALLORY_URL, MALLORY_TOKEN and
  the README's path; prints EDN {:faults [...]} (the faults the README run enacted) last.
  Exit status 0 iff every assertion held."
  (:require [clojure.test :refer [deftest is testing] :as t]
            [jepsen.client :as client]
            [jepsen.db :as db]
            [jepsen.generator :as gen]
            [jepsen.nemesis.combined :as nc]
            [mallory.jepsen :as mallory]
            [mallory.jepsen.interpreter :as interpreter]
            [mallory.jepsen.mediator :as m]))

(def url (System/getenv "MALLORY_URL"))
(def token (System/getenv "MALLORY_TOKEN"))
(def readme (first *command-line-args*))
(def nodes ["n1" "n2" "n3"])
(def a-test {:name "mallory-combinators-test", :nodes nodes})
(def result (atom {}))

(defn- run [gen & {:as opts}]
  (interpreter/run! a-test gen (merge {:invoke-client (fn [_ op] (assoc op :type :ok))} opts)))

(defn- invokes [history] (filter #(= :invoke (:type %)) history))

;; -- the stand-ins run as Jepsen's combinators do ---------------------------------------------

(defrecord Spy [seen done?]
  ;; one nemesis op, then exhausted only once it has seen that op complete; records the
  ;; process of every event it is updated with
  gen/Generator
  (op [this _ ctx]
    (cond (= 2 (count @seen)) nil
          done?               [:pending this]
          :else               (let [o (gen/fill-in-op {:type :info, :f :x} ctx)]
                                [o (if (= :pending o) this (assoc this :done? true))])))
  (update [this _ _ event] (swap! seen conj (:process event)) this))

(deftest the-stand-in-combinators-behave-like-jepsens
  (testing "maps: one op each, filled in; vectors in turn; functions again and again; once"
    (let [h (run [{:f :a} (gen/once (fn [] {:f :b})) (gen/limit 2 (fn [_ _] {:f :c}))])]
      (is (= [:a :b :c :c] (map :f (invokes h))))
      (is (every? integer? (map :process (invokes h))))))
  (testing "nemesis / clients: each generator only on its own threads"
    (let [h (run (gen/nemesis (gen/limit 3 (fn [] {:type :info, :f :fault}))
                              (gen/limit 6 (fn [] {:f :write}))))]
      (is (= 6 (count (invokes h))))
      (is (every? integer? (map :process (invokes h))))
      (is (= #{:nemesis} (set (map :process (filter #(= :fault (:f %)) h)))))
      (is (= 6 (count (filter #(= :fault (:f %)) h))) "3 faults, invoked and completed")))
  (testing "on-threads: updates only for the wrapped threads' events"
    (let [seen (atom [])]
      (run (gen/any (gen/nemesis (->Spy seen false)) (gen/clients (gen/limit 4 (fn [] {:f :w})))))
      (is (= [:nemesis :nemesis] @seen) "its invocation and completion, none of the clients'")))
  (testing "phases: the next generator starts once every op of the previous completed"
    (let [h      (run (gen/phases (gen/limit 4 (fn [] {:f :one})) {:f :two}))
          second (first (keep-indexed #(when (= :two (:f %2)) %1) h))]
      (is (= 8 (count (filter #(= :one (:f %)) (take second h)))))))
  (testing "stagger spaces ops; time-limit ends the generator dt after its first op"
    (let [h     (run (gen/time-limit 0.3 (gen/stagger 0.02 (fn [] {:f :w}))))
          times (map :time (invokes h))]
      (is (< 3 (count times) 60) (str (count times) " ops in 0.3 s at a mean spacing of 20 ms"))
      (is (< (- (last times) (first times)) 3e8))
      (is (apply <= times)))))

;; -- kill and pause only for a DB that can ------------------------------------------------------

(def plain-db (reify db/DB (setup! [_ _ _]) (teardown! [_ _ _])))
(def killable (reify db/DB (setup! [_ _ _]) (teardown! [_ _ _])
                     db/Process (kill! [_ _ _]) (start! [_ _ _])))
(def pausable (reify db/DB (setup! [_ _ _]) (teardown! [_ _ _])
                     db/Pause (pause! [_ _ _]) (resume! [_ _ _])))
(def both (reify db/DB (setup! [_ _ _]) (teardown! [_ _ _])
                 db/Process (kill! [_ _ _]) (start! [_ _ _])
                 db/Pause (pause! [_ _ _]) (resume! [_ _ _])))

(defn- actions [o] (mapv first (mallory/catalogue o (nc/nemesis-packages o))))

(deftest kill-and-pause-only-for-a-db-that-can
  (let [o {:faults [:partition :kill :pause], :partition {:targets [:one]},
           :kill {:targets [:one]}, :pause {:targets [:one]}}]
    (is (= ["start-partition:one" "stop-partition"] (actions o)) "no :db: neither")
    (is (= ["start-partition:one" "stop-partition"] (actions (assoc o :db plain-db))) "a DB that can neither")
    (is (= ["start-partition:one" "stop-partition" "kill:one" "start:all"] (actions (assoc o :db killable))))
    (is (= ["start-partition:one" "stop-partition" "pause:one" "resume:all"] (actions (assoc o :db pausable))))
    (is (= ["start-partition:one" "stop-partition" "kill:one" "start:all" "pause:one" "resume:all"]
           (actions (assoc o :db both))))
    (testing "the heals Jepsen's own db package ends with are those of the faults offered"
      (doseq [d [killable pausable both]
              :let [o (assoc o :db d)
                    final (:final-generator (last (nc/nemesis-packages o)))]]
        (is (= (set (map :f final))
               (set (for [a (actions o) :when (#{"start:all" "resume:all"} a)]
                      (keyword (first (.split ^String a ":")))))))))
    (testing "kill alone asked for, of a DB that can only pause: nothing from the db package"
      (let [o {:faults [:kill], :db pausable}]
        (is (= ::mallory/empty-catalogue
               (:type (try (actions o) nil (catch clojure.lang.ExceptionInfo e (ex-data e))))))))))

;; -- file corruptions drawn per op ------------------------------------------------------------

(deftest file-corruption-distributions-are-drawn-for-each-op-as-jepsen-draws-them
  (let [o       {:faults [:file-corruption], :interval 0.001
                 :file-corruption {:targets [:one]
                                   :corruptions [{:type :bitflip, :file "/db",
                                                  :probability {:distribution :one-of, :values [1e-3 1e-4]}}
                                                 {:type :truncate, :file "/wal",
                                                  :drop {:distribution :uniform, :min 1, :max 64}}
                                                 {:type :bitflip, :file "/log", :probability 1e-5}]}}
        catalog (mallory/catalogue o (nc/nemesis-packages o))
        op-of   (fn [action] ((some (fn [[a f]] (when (= a action) f)) catalog) a-test))
        flips   (repeatedly 60 #(op-of "bitflip:one:/db"))
        cuts    (repeatedly 60 #(op-of "truncate:one:/wal"))]
    (is (= ["bitflip:one:/db" "bitflip:one:/log" "truncate:one:/wal"] (map first catalog)))
    (is (= #{1e-3 1e-4} (set (map #(get-in % [:value 1 :probability]) flips))) "a value of the map, drawn anew")
    (is (every? #(<= 1 (get-in % [:value 1 :drop]) 63) cuts))
    (is (< 1 (count (set (map #(get-in % [:value 1 :drop]) cuts)))) "not one draw reused")
    (is (= {:type :info, :f :bitflip, :value [:one {:file "/log", :probability 1e-5}]} (op-of "bitflip:one:/log")))
    (testing "the same op shape as Jepsen's own file-corruption generator"
      (let [stock (->> (run (gen/nemesis (gen/limit 30 (:generator (nth (nc/nemesis-packages o) 2))))
                            :timeout-ms 120000)
                       (filter #(= :info (:type %))))
            shape (fn [op] [(:type op) (:f op) (first (:value op)) (set (keys (second (:value op))))
                            (every? number? (vals (dissoc (second (:value op)) :file)))])]
        (is (seq stock))
        (is (= (set (map shape stock)) (set (map shape (concat flips cuts [(op-of "bitflip:one:/log")])))))))))

;; -- the README's wiring, run ---------------------------------------------------------------

(defrecord CountingClient [log]
  client/Client
  (open! [this _ _] this)
  (setup! [_ _])
  (invoke! [_ _ op] (swap! log conj (:f op)) (assoc op :type :ok))
  (teardown! [_ _])
  (close! [_ _]))

(deftest the-readmes-wiring-runs-under-the-interpreter
  (let [blocks (map second (re-seq #"(?s)```clojure\n(.*?)```" (slurp readme)))]
    (is (= 2 (count blocks)) "a before and an after block")
    (doseq [block blocks]
      (binding [*ns* *ns*] (load-string block)))
    (let [my-test  (resolve 'my.db.test/my-test)
          log      (atom [])
          workload {:client (->CountingClient log), :generator (fn [] {:f :write, :value (rand-int 5)})
                    :checker :checker}
          wired    (my-test {:workload-fn (constantly workload), :mallory-url url, :time-limit 3,
                             :nodes nodes, :faults [:partition], :partition {:targets [:one :majority]}
                             :mallory {:window-ms 200}})
          conn     (:conn (:client wired))
          on-heal  (atom [])
          history  (interpreter/run! wired (:generator wired)
                                     {:concurrency 2
                                      :invoke-client (fn [test op] (client/invoke! (:client wired) test op))
                                      :invoke-nemesis (fn [_ op]
                                                        (when (= :stop-partition (:f op))
                                                          (swap! on-heal conj (some? (:test (m/status conn)))))
                                                        (assoc op :type :info))})
          clients  (remove #(= :nemesis (:process %)) history)
          faults   (filter #(= :nemesis (:process %)) history)
          last-client (apply max (map :index clients))]
      (is (instance? mallory.jepsen.RelayingClient (:client wired)))
      (testing "the workload ran on the clients, through the relaying client, for the time limit"
        (is (< 10 (count (invokes clients))))
        (is (= (count (invokes clients)) (count @log)))
        (is (every? #(= :write (:f %)) clients))
        (is (< (- (:time (last (invokes clients))) (:time (first (invokes clients)))) 3e9)))
      (testing "every nemesis op is one of Mallory's, invoked then completed, one at a time"
        (is (seq faults))
        (is (every? #{:start-partition :stop-partition} (map :f faults)))
        (is (every? (fn [[a b]] (and (= (:f a) (:f b)) (= (:value a) (:value b)))) (partition 2 faults))))
      (testing "then the heal, after every client op, with the mediator's test still on; then the end"
        (let [heal (last faults)]
          (is (= [:stop-partition nil] [(:f heal) (:value heal)]))
          (is (< last-client (:index (last (butlast faults))))))
        (is (= [true] (take-last 1 @on-heal)))
        (is (nil? (:test (m/status conn))) "the test ended on the mediator"))
      (m/flush! conn)
      (is (= 0 (:dropped (m/relay-stats conn))))
      (swap! result assoc :faults (mapv (fn [[invoke _]] (:f invoke)) (partition 2 (butlast (butlast faults))))
                          :clients (count (invokes clients)))
      (m/close! conn))))

(let [counters (binding [t/*test-out* *err*
                         t/*report-counters* (ref t/*initial-report-counters*)]
                 (t/test-vars [#'the-stand-in-combinators-behave-like-jepsens
                               #'kill-and-pause-only-for-a-db-that-can
                               #'file-corruption-distributions-are-drawn-for-each-op-as-jepsen-draws-them
                               #'the-readmes-wiring-runs-under-the-interpreter])
                 (binding [*out* *err*] (println "counters" @t/*report-counters*))
                 @t/*report-counters*)]
  (println (pr-str @result))
  (shutdown-agents)
  (System/exit (if (t/successful? counters) 0 1)))
