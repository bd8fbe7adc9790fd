(ns mallory.jepsen
  "Makes a stock Jepsen 0.3.x test adaptive: Mallory's mediator picks every nemesis op.

  - `nemesis-package` takes the standard packages of jepsen.nemesis.combined (and the same
    options map), derives the fault catalogue from their :perf (the fs each package starts,
    stops and otherwise emits) and the target specs in the options, and returns a package
    whose :generator asks the mediator for each fault and whose :final-generator heals
    everything the packages can break (then ends the test on the mediator).
  - `generator` is that adaptive generator on its own (a jepsen.generator/Generator).
  - `client` wraps a jepsen.client/Client so every invocation and completion is relayed.

  Actions are named \"f:target\" after the op they stand for, e.g. \"start-partition:majority\",
  \"kill:one\", \"start-packet:all:delay\", \"stop-partition\", \"start:all\"."
  (:require [clojure.string :as str]
            [jepsen.client :as client]
            [jepsen.db :as db]
            [jepsen.generator :as gen]
            [jepsen.nemesis :as n]
            [jepsen.nemesis.combined :as nc]
            [jepsen.util :as util]
            [mallory.jepsen.mediator :as m])
  (:import (java.util.concurrent ExecutionException)))

;; -- node specs, as jepsen.nemesis.combined/db-nodes reads them ------------------------------

(def default-faults
  "nemesis-packages' own default."
  [:partition :packet :kill :pause :clock :file-corruption])

(def default-node-specs
  "combined/node-specs without nil (a random subset has no stable name) and :primaries
  (needs the DB; name it in the options' :targets when your DB has primaries)."
  [:one :minority-third :minority :majority :all])

(defn- majority [n] (inc (quot n 2)))

(defn spec-nodes
  "The nodes of `test` a node spec names (nil, :one, :minority, :majority, :minority-third,
  :all, or a collection of nodes)."
  [test spec]
  (let [nodes (vec (:nodes test))
        n     (count nodes)]
    (case spec
      nil             (take (inc (rand-int n)) (shuffle nodes))
      :one            [(rand-nth nodes)]
      :minority       (take (dec (majority n)) (shuffle nodes))
      :majority       (take (majority n) (shuffle nodes))
      :minority-third (take (quot (dec n) 3) (shuffle nodes))
      :all            nodes
      (if (coll? spec)
        (vec spec)
        (throw (ex-info (str "mallory: cannot resolve node spec " (pr-str spec) " without the DB")
                        {:type ::bad-target :spec spec}))))))

(defn- spec-name [spec]
  (cond (keyword? spec) (name spec)
        (coll? spec)    (str/join "," (map #(if (keyword? %) (name %) (str %)) spec))
        :else           (str spec)))

;; -- the families of the standard packages, by their :perf :name ----------------------------

(defn- clock-bump [test spec]
  (zipmap (spec-nodes test spec)
          (repeatedly #(long (* (rand-nth [-1 1]) (Math/pow 2 (+ 2 (rand 16))))))))

(defn- clock-strobe [test spec]
  (zipmap (spec-nodes test spec)
          (repeatedly (fn [] {:delta    (long (Math/pow 2 (+ 2 (rand 16))))
                              :period   (long (Math/pow 2 (rand 10)))
                              :duration (rand 32)}))))

(defn- behavior-name [behavior]
  (if (empty? behavior) "none" (str/join "+" (map name (sort (keys behavior))))))

(defn- corruption-name [{:keys [file]}] (str file))

(defn- drawn
  "A corruption's :probability or :drop as jepsen.nemesis.combined resolves it before each
  op: a number as it is, a distribution map drawn from (jepsen.util/rand-distribution)."
  [x]
  (cond (number? x) x
        (map? x)    (util/rand-distribution x)))

(defn- corruption
  "The corruption of one op, as Jepsen's file-corruption package emits it: {:file :probability}
  for a bitflip, {:file :drop} for a truncate, the value drawn afresh for each op."
  [{:keys [type file probability drop]}]
  (case type
    :bitflip  {:file file, :probability (drawn probability)}
    :truncate {:file file, :drop (drawn drop)}))

(def families
  "For each standard package (its :perf :name): the fault that enables it, where its
  targets are in the options, the default targets, and the :value of each f: for faults
  (fn [test target] value), for heals [name-suffix (fn [test] value)]. :offered?, when
  present, is what the options' :db must be for Jepsen to emit the family at all: its
  db-package kills only a DB implementing jepsen.db/Process and pauses only one
  implementing jepsen.db/Pause."
  {"partition" {:fault :partition
                :targets (fn [opts] (:targets (:partition opts) [:one :minority-third :majority :majorities-ring]))
                :value {:start-partition (fn [_ spec] spec)}
                :heal {:stop-partition [nil (constantly nil)]}}
   "kill"      {:fault :kill
                :targets (fn [opts] (:targets (:kill opts) default-node-specs))
                :offered? (fn [opts] (satisfies? db/Process (:db opts)))
                :value {:kill (fn [_ spec] spec)}
                :heal {:start ["all" (constantly :all)]}}
   "pause"     {:fault :pause
                :targets (fn [opts] (:targets (:pause opts) default-node-specs))
                :offered? (fn [opts] (satisfies? db/Pause (:db opts)))
                :value {:pause (fn [_ spec] spec)}
                :heal {:resume ["all" (constantly :all)]}}
   "packet"    {:fault :packet
                :targets (fn [opts] (for [t (:targets (:packet opts) default-node-specs)
                                          b (:behaviors (:packet opts) [{}])]
                                      [t b]))
                :name (fn [[t b]] (str (spec-name t) ":" (behavior-name b)))
                :value {:start-packet (fn [_ [t b]] [t b])}
                :heal {:stop-packet [nil (constantly nil)]}}
   "clock"     {:fault :clock
                :targets (fn [opts] (:targets (:clock opts) default-node-specs))
                :value {:bump-clock clock-bump, :strobe-clock clock-strobe}
                :heal {:reset-clock ["all" (fn [test] (vec (:nodes test)))]}}
   "file-corruption"
               {:fault :file-corruption
                :targets (fn [opts] (for [t (:targets (:file-corruption opts) default-node-specs)
                                          c (:corruptions (:file-corruption opts))]
                                      [t c]))
                :name (fn [[t c]] (str (spec-name t) ":" (corruption-name c)))
                :value {:bitflip  (fn [_ [t c]] [t (corruption c)])
                        :truncate (fn [_ [t c]] [t (corruption c)])}
                :only (fn [f [_ c]] (= (name f) (name (:type c))))}})

(defn- family-actions
  "[[action op-fn] ...] for one :perf entry of an enabled package."
  [opts perf]
  (let [family (get families (:name perf))
        fs     (sort-by name (concat (:start perf) (:fs perf)))
        heals  (sort-by name (:stop perf))
        named  (fn [f target] (str (name f) ":" ((:name family spec-name) target)))]
    (cond
      (not family)
      ;; a package of your own (its :perf, or the fs its nemesis reflects): nil :values
      (for [f (concat fs heals)]
        [(name f) (fn [_] {:type :info, :f f, :value nil})])

      (not ((:offered? family (constantly true)) opts))
      []

      :else
      (concat
        (for [f fs
              :let [value (get-in family [:value f])]
              :when value
              target ((:targets family) opts)
              :when ((:only family (constantly true)) f target)]
          [(named f target) (fn [test] {:type :info, :f f, :value (value test target)})])
        (for [f heals
              :let [[suffix heal] (get-in family [:heal f])]
              :when heal]
          [(if suffix (str (name f) ":" suffix) (name f))
           (fn [test] {:type :info, :f f, :value (heal test)})])))))

(defn- perfs
  "A package's :perf; for a package without one, a single entry of the fs its nemesis
  reflects (jepsen.nemesis/Reflection), if it does."
  [{:keys [perf nemesis]}]
  (cond (seq perf)                         (sort-by :name perf)
        (satisfies? n/Reflection nemesis)  [{:name ::reflected, :fs (set (n/fs nemesis))}]
        :else                              []))

(defn- enabled-perfs
  "The :perf entries of the packages that would emit ops under `opts`' :faults."
  [opts packages]
  (let [faults (set (:faults opts default-faults))]
    (for [pkg   packages
          :when (:generator pkg)
          perf  (perfs pkg)
          :let  [fault (:fault (get families (:name perf)))]
          :when (or (nil? fault) (faults fault))]
      perf)))

(defn catalogue
  "The actions the standard `packages` (built from `opts`) can take, as an ordered vector
  of [action-name op-fn]; (op-fn test) is the nemesis op for that action."
  [opts packages]
  (let [actions (vec (mapcat (partial family-actions opts) (enabled-perfs opts packages)))
        names   (map first actions)]
    (when (empty? actions)
      (throw (ex-info "mallory: no enabled package emits any op: check :faults and the packages"
                      {:type ::empty-catalogue :faults (:faults opts)})))
    (when-let [long-name (first (filter #(< 64 (count %)) names))]
      (throw (ex-info (str "mallory: action name longer than 64 characters: " long-name)
                      {:type ::bad-action :action long-name})))
    (when-let [twice (seq (for [[a k] (frequencies names) :when (< 1 k)] a))]
      (throw (ex-info (str "mallory: several ops would be named " (str/join ", " twice)
                           " (packet behaviours are named by their keys: give them distinct ones)")
                      {:type ::bad-action :actions (vec twice)})))
    actions))

;; -- the adaptive generator ---------------------------------------------------------------

(defn- ask!
  "On a future: starts the test and declares the catalogue once per generator, then asks for
  the next fault. Returns {:action :op :answer}."
  [conn actions session test]
  (locking session
    (when-not @session
      (m/start-test! conn (:name test "jepsen"))
      (m/send-catalogue! conn (map first actions))
      (reset! session true)))
  (let [answer (m/next-fault! conn)
        action (:action answer)
        op-fn  (some (fn [[a f]] (when (= a action) f)) actions)]
    (when-not op-fn
      (throw (ex-info (str "mallory: the mediator chose " (pr-str action) ", not in the catalogue")
                      {:type ::unknown-action :action action})))
    {:action action, :op (op-fn test), :answer answer}))

(defn- answer! [f]
  (try @f
       (catch ExecutionException e (throw (or (.getCause e) e)))))

(defrecord AdaptiveGenerator [conn actions window-ns session ask opened-at awaiting last-answer]
  gen/Generator
  (op [this test ctx]
    (cond
      ;; our fault is still being enacted: the next ask waits for its completion
      awaiting [:pending this]
      ;; the window after a fault is open: the learner judges it when it closes
      (and opened-at (< (:time ctx) (+ opened-at window-ns))) [:pending this]
      :else
      (let [f (locking ask (or @ask (reset! ask (future (ask! conn actions session test)))))]
        (if-not (realized? f)
          [:pending this]
          (let [{:keys [action op answer]} (answer! f)
                [filled _] (gen/op op test ctx)]
            (if (= :pending filled)
              [:pending this]          ; the nemesis is busy: same answer next time
              [filled (assoc this
                             :ask (atom nil)
                             :awaiting {:action action, :f (:f op), :invoked? false}
                             :last-answer answer)]))))))

  (update [this test ctx event]
    (if (and awaiting (= :nemesis (:process event)) (= (:f awaiting) (:f event)))
      (if-not (:invoked? awaiting)
        (assoc this :awaiting (assoc awaiting :invoked? true))  ; the invocation
        (do (m/report-fault-async! conn (:action awaiting))      ; the completion
            (assoc this :awaiting nil, :opened-at (:time event))))
      this)))

(defn generator
  "An adaptive nemesis generator over `actions` ([[name op-fn] ...], see `catalogue`).
  Options: :window-ms, the stretch after each completed fault the learner judges before the
  next ask (default 2500, the paper's window)."
  ([conn actions] (generator conn actions {}))
  ([conn actions {:keys [window-ms] :or {window-ms 2500}}]
   (map->AdaptiveGenerator {:conn conn, :actions (vec actions), :window-ns (long (* window-ms 1000000))
                            :session (atom false), :ask (atom nil)})))

(defrecord EndTest [conn done]
  gen/Generator
  (op [this test ctx]
    (when (compare-and-set! done false true)
      (try (m/await-reports conn)
           (m/end-test! conn)
           (catch Exception e
             (binding [*out* *err*]
               (println "mallory: could not end the test on the mediator:" (.getMessage e))))))
    nil)
  (update [this test ctx event] this))

(defn end-test
  "A generator that emits nothing and ends the test on the mediator the first time it is
  asked (the learner checkpoints); a failure there is printed, not thrown."
  [conn]
  (->EndTest conn (atom false)))

(defn nemesis-package
  "Takes a mediator connection, the options map of jepsen.nemesis.combined/nemesis-packages
  (:db, :faults, :partition {:targets ..}, :packet {:targets .. :behaviors ..}, :kill, :pause,
  :clock, :file-corruption; plus :mallory {:window-ms ..}) and the packages built from it.
  As Jepsen does, kill and pause are offered only for a :db implementing jepsen.db/Process
  and jepsen.db/Pause.
  Returns the composed package with Mallory's generator and a final generator that heals
  every enabled package's faults and then, once the nemesis is free again (every heal
  completed), ends the test on the mediator."
  [conn opts packages]
  (let [actions  (catalogue opts packages)
        enabled  (filter :generator packages)]
    (assoc (nc/compose-packages packages)
           :generator       (generator conn actions (:mallory opts))
           :final-generator (vec (concat (keep :final-generator enabled) [(gen/synchronize (end-test conn))]))
           :mallory/catalogue (mapv first actions))))

;; -- the client wrapper -------------------------------------------------------------------

(defrecord RelayingClient [conn client]
  client/Client
  (open! [this test node] (->RelayingClient conn (client/open! client test node)))
  (setup! [this test] (client/setup! client test))
  (invoke! [this test op]
    (m/relay-op! conn op)
    (let [done (try (client/invoke! client test op)
                    (catch Throwable t
                      (m/relay-op! conn (assoc op :type :info))  ; Jepsen records a throw as :info
                      (throw t)))]
      (m/relay-op! conn done)
      done))
  (teardown! [this test] (client/teardown! client test))
  (close! [this test] (client/close! client test))

  client/Reusable
  (reusable? [this test] (client/is-reusable? client test)))

(defn client
  "Wraps a Jepsen client: every invocation and completion is relayed to the mediator
  (asynchronously; see mallory.jepsen.mediator/relay-op!)."
  [conn wrapped]
  (->RelayingClient conn wrapped))
