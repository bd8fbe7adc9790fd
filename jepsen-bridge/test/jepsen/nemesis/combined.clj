(ns jepsen.nemesis.combined
  "STAND-IN for Jepsen 0.3.x's jepsen.nemesis.combined (the bridge's tests only), written
  after reading Jepsen's combined.clj: the packages nemesis-packages builds, with what the
  bridge reads from them as Jepsen makes it.

  - Every package's :perf, as Jepsen's (the db package's names both kill and pause,
    whatever the DB can do).
  - A :generator exactly when Jepsen's is non-nil: the fault is in :faults and, for the db
    package, the DB (:db in the options) implements jepsen.db/Process (kill) or
    jepsen.db/Pause (pause); Jepsen's gen/mix of no mode is nil.
  - The :final-generator Jepsen's package has: stop maps for partitions and packets, a
    once-function resetting every node's clock, for the db package [resume start] as far
    as the DB supports them; the file-corruption package has none.
  - The file-corruption :generator emits Jepsen's ops, its :probability / :drop
    distribution maps resolved by jepsen.util/rand-distribution (the bridge is compared
    with it). The other stock generators are `Replaced`: the bridge swaps in its own, and
    one that is ever asked for an op throws.
  - Nemeses are markers: the bridge passes them through untouched."
  (:require [clojure.set :as set]
            [jepsen.db :as db]
            [jepsen.generator :as gen]
            [jepsen.util :as util]))

(defrecord Replaced [what]
  gen/Generator
  (op [_ _ _]
    (throw (ex-info (str "stand-in: the stock " what " generator ran; the bridge must replace it") {})))
  (update [this _ _ _] this))

(def noop {:generator nil, :final-generator nil, :nemesis :noop, :perf #{}})

(defn node-specs [db]
  (cond-> [nil :one :minority-third :minority :majority :all]
    (satisfies? db/Primary db) (conj :primaries)))

(defn partition-specs [db]
  (cond-> [:one :minority-third :majority :majorities-ring]
    (satisfies? db/Primary db) (conj :primaries)))

(defn partition-package [{:keys [faults] :as opts}]
  (let [needed? (faults :partition)]
    {:generator       (when needed? (->Replaced "partition"))
     :final-generator (when needed? {:type :info, :f :stop-partition, :value nil})
     :nemesis         :partition-nemesis
     :perf            #{{:name "partition", :start #{:start-partition}, :stop #{:stop-partition},
                         :color "#E9DCA0"}}}))

(defn packet-package [{:keys [faults] :as opts}]
  (let [needed? (faults :packet)]
    {:generator       (when needed? (->Replaced "packet"))
     :final-generator (when needed? {:type :info, :f :stop-packet, :value nil})
     :nemesis         :packet-nemesis
     :perf            #{{:name "packet", :start #{:start-packet}, :stop #{:stop-packet}, :color "#D1E8A0"}}}))

(defn- resolved
  "A corruption's :probability or :drop: a number as it is, a distribution map drawn from."
  [x]
  (cond (number? x) x
        (map? x)    (util/rand-distribution x)))

(defn file-corruption-package [{:keys [faults db file-corruption interval]}]
  (let [needed?     (faults :file-corruption)
        targets     (:targets file-corruption (node-specs db))
        corruptions (:corruptions file-corruption)
        one-op      (fn [_test _ctx]
                      (let [{:keys [type file probability drop]} (rand-nth corruptions)]
                        {:type  :info
                         :f     type
                         :value [(rand-nth targets)
                                 (case type
                                   :bitflip  {:file file, :probability (resolved probability)}
                                   :truncate {:file file, :drop (resolved drop)})]}))]
    {:generator (when needed? (gen/stagger (or interval 10) one-op))
     :nemesis   :file-corruption-nemesis
     :perf      #{{:name "file-corruption", :fs #{:bitflip :truncate}, :start #{}, :stop #{},
                   :color "#99F2E2"}}}))

(defn clock-package [{:keys [faults] :as opts}]
  (let [needed? (faults :clock)]
    {:generator       (when needed? (->Replaced "clock"))
     :final-generator (when needed?
                        (gen/once (fn [test _ctx] {:type :info, :f :reset-clock, :value (:nodes test)})))
     :nemesis         :clock-nemesis
     :perf            #{{:name "clock", :start #{:bump-clock}, :stop #{:reset-clock}, :fs #{:strobe-clock},
                         :color "#A0E9E3"}}}))

(defn db-package [{:keys [faults db] :as opts}]
  (let [needed? (some #{:kill :pause} faults)
        kill?   (and (satisfies? db/Process db) (contains? faults :kill))
        pause?  (and (satisfies? db/Pause db) (contains? faults :pause))
        modes   (cond-> [] pause? (conj :pause-resume) kill? (conj :kill-start))]
    {:generator       (when (and needed? (seq modes)) (->Replaced (str "db " modes)))
     :final-generator (when needed?
                        (cond-> []
                          pause? (conj {:type :info, :f :resume, :value :all})
                          kill?  (conj {:type :info, :f :start, :value :all})))
     :nemesis         :db-nemesis
     :perf            #{{:name "kill", :start #{:kill}, :stop #{:start}, :color "#E9A4A0"}
                        {:name "pause", :start #{:pause}, :stop #{:resume}, :color "#A0B1E9"}}}))

(defn compose-packages [packages]
  (case (count packages)
    0 noop
    1 (first packages)
    {:generator       (apply gen/any (keep :generator packages))
     :final-generator (keep :final-generator packages)
     :nemesis         [:stand-in :compose (vec (keep :nemesis packages))]
     :perf            (reduce set/union (map :perf packages))}))

(defn nemesis-packages [opts]
  (let [opts (assoc opts :faults (set (:faults opts [:partition :packet :kill :pause :clock :file-corruption])))]
    [(partition-package opts)
     (packet-package opts)
     (file-corruption-package opts)
     (clock-package opts)
     (db-package opts)]))

(defn nemesis-package [opts]
  (compose-packages (nemesis-packages opts)))
