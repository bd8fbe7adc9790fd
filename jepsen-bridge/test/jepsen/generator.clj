(ns jepsen.generator
  "STAND-IN for Jepsen 0.3.x's jepsen.generator, used only by the bridge's tests (Jepsen's
  jars cannot be fetched here). Written for these tests after reading Jepsen's
  generator.clj; it BEHAVES like Jepsen's for what the bridge and its README rely on, so a
  generator composed here runs as it would under Jepsen's interpreter
  (test/mallory/jepsen/interpreter.clj drives one):

    (op gen test ctx)           => [op gen'] | [:pending gen] | nil (exhausted)
    (update gen test ctx event) => gen'

  - nil: exhausted. A map: one op, filled in from the context (:time, :type :invoke,
    :process of a free thread), or :pending while no thread is free. A function of no or
    two (test ctx) arguments: its result is a generator used until exhausted, then the
    function is called again. A sequence (vector, list): each element's ops in turn;
    updates go to the element in use.
  - on-threads / nemesis / clients: the wrapped generator sees a context of only the
    threads it may use, and only their events. any: the soonest op of several generators,
    updates to all. synchronize: :pending until every thread of the context is free.
    phases: each generator synchronized, in turn. stagger: ops spaced by uniformly random
    intervals of mean dt seconds. time-limit: ops until dt seconds after the first.
    limit / once, repeat.

  Differences that do not matter here: ops are plain maps where Jepsen builds
  jepsen.history.Op records; ties in `any` go to the earlier generator where Jepsen picks
  at random; a context is the map {:time ns, :free-threads #{thread},
  :workers {thread process}} where Jepsen has a record."
  (:refer-clojure :exclude [update repeat]))

(defprotocol Generator
  (update [gen test context event]
    "Updates the generator to reflect an event having taken place.")
  (op [gen test context]
    "Obtains the next operation: [op gen'], [:pending gen], or nil when exhausted."))

;; -- contexts ------------------------------------------------------------------------------

(defn all-threads [ctx] (set (keys (:workers ctx))))
(defn free-threads [ctx] (:free-threads ctx))

(defn process->thread [ctx process]
  (some (fn [[thread p]] (when (= p process) thread)) (:workers ctx)))

(defn some-free-process
  "A process of some free thread, or nil."
  [ctx]
  (some (:workers ctx) (sort-by str (:free-threads ctx))))

(defn- only-threads
  "The context restricted to the threads satisfying `pred`."
  [pred ctx]
  (-> ctx
      (assoc :free-threads (set (filter pred (:free-threads ctx))))
      (assoc :workers (into {} (filter (comp pred key) (:workers ctx))))))

;; -- the default generators -----------------------------------------------------------------

(defn fill-in-op
  "op with :time, :type :invoke and the :process of a free thread filled in where absent;
  :pending when no thread is free."
  [op ctx]
  (if-let [p (some-free-process ctx)]
    (merge {:time (:time ctx), :type :invoke, :process p} op)
    :pending))

(defn- takes-test-and-ctx? [f]
  (boolean (some #(and (= "invoke" (.getName ^java.lang.reflect.Method %))
                       (= 2 (.getParameterCount ^java.lang.reflect.Method %)))
                 (.getDeclaredMethods (class f)))))

(declare ->Seq)

(extend-protocol Generator
  nil
  (update [_ _ _ _] nil)
  (op [_ _ _] nil)

  clojure.lang.APersistentMap
  (update [this _ _ _] this)
  (op [this _ ctx]
    (let [filled (fill-in-op this ctx)]
      [filled (when (= :pending filled) this)]))

  clojure.lang.AFunction
  (update [this _ _ _] this)
  (op [this test ctx]
    (when-let [g (if (takes-test-and-ctx? this) (this test ctx) (this))]
      (op [g this] test ctx)))

  clojure.lang.Sequential
  (update [this test ctx event]
    (when (seq this)
      (cons (update (first this) test ctx event) (rest this))))
  (op [this test ctx]
    (loop [gens (seq this)]
      (when gens
        (if-let [[o g'] (op (first gens) test ctx)]
          [o (if (next gens) (cons g' (next gens)) g')]
          (recur (next gens)))))))

;; -- combinators ----------------------------------------------------------------------------

(defrecord OnThreads [pred gen]
  Generator
  (op [_ test ctx]
    (when-let [[o g'] (op gen test (only-threads pred ctx))]
      [o (OnThreads. pred g')]))
  (update [this test ctx event]
    (if (pred (process->thread ctx (:process event)))
      (OnThreads. pred (update gen test (only-threads pred ctx) event))
      this)))

(defn on-threads
  "gen, used only by the threads satisfying `pred`, seeing only their events."
  [pred gen]
  (when gen (OnThreads. pred gen)))

(defn- soonest
  "Of [i op gen'] candidates, the one whose op comes first: a real op before :pending, an
  earlier :time before a later one, the earlier generator on a tie."
  [a b]
  (cond (nil? a) b
        (nil? b) a
        (= :pending (second a)) (if (= :pending (second b)) a b)
        (= :pending (second b)) a
        (<= (:time (second a)) (:time (second b))) a
        :else b))

(defrecord Any [gens]
  Generator
  (op [_ test ctx]
    (when-let [[i o g'] (reduce soonest nil
                                (keep-indexed (fn [i g] (when-let [[o g'] (op g test ctx)] [i o g'])) gens))]
      [o (Any. (assoc gens i g'))]))
  (update [_ test ctx event]
    (Any. (mapv #(update % test ctx event) gens))))

(defn any
  "Ops from whichever of `gens` has the soonest; updates go to all of them."
  [& gens]
  (let [gens (vec (remove nil? gens))]
    (case (count gens)
      0 nil
      1 (first gens)
      (Any. gens))))

(declare nemesis)

(defn clients
  "One arity: gen, for every thread but the nemesis. Two: client-gen for the clients,
  nemesis-gen for the nemesis."
  ([client-gen] (on-threads #(not= :nemesis %) client-gen))
  ([client-gen nemesis-gen] (any (clients client-gen) (nemesis nemesis-gen))))

(defn nemesis
  "One arity: gen, for the nemesis thread only. Two: nemesis-gen for the nemesis,
  client-gen for the clients."
  ([nemesis-gen] (on-threads #{:nemesis} nemesis-gen))
  ([nemesis-gen client-gen] (any (nemesis nemesis-gen) (clients client-gen))))

(defrecord Synchronize [gen]
  Generator
  (op [this test ctx]
    (if (= (count (free-threads ctx)) (count (all-threads ctx)))
      (op gen test ctx)
      [:pending this]))
  (update [_ test ctx event] (Synchronize. (update gen test ctx event))))

(defn synchronize
  "gen, once every thread of the context is free."
  [gen]
  (Synchronize. gen))

(defn phases
  "Each generator in turn, each starting once every thread is free."
  [& gens]
  (let [gens (map synchronize (remove nil? gens))]
    (case (count gens)
      0 nil
      1 (first gens)
      (vec gens))))

(defrecord Stagger [dt next-time gen]
  Generator
  (op [this test ctx]
    (when-let [[o g'] (op gen test ctx)]
      (if (= :pending o)
        [o this]
        (let [due (or next-time (:time ctx))
              o   (if (< (:time o) due) (assoc o :time due) o)]
          [o (Stagger. dt (+ (:time o) (long (rand dt))) g')]))))
  (update [_ test ctx event] (Stagger. dt next-time (update gen test ctx event))))

(defn stagger
  "gen's ops spaced by uniformly random intervals in [0, 2 dt) seconds, across all threads."
  [dt gen]
  (when gen (Stagger. (long (* 2 dt 1e9)) nil gen)))

(defrecord TimeLimit [limit cutoff gen]
  Generator
  (op [_ test ctx]
    (when-let [[o g'] (op gen test ctx)]
      (if (= :pending o)
        [o (TimeLimit. limit cutoff g')]
        (let [cutoff (or cutoff (+ (:time o) limit))]
          (when (< (:time o) cutoff)
            [o (TimeLimit. limit cutoff g')])))))
  (update [_ test ctx event] (TimeLimit. limit cutoff (update gen test ctx event))))

(defn time-limit
  "gen's ops until dt seconds after its first."
  [dt gen]
  (when (and gen (pos? dt)) (TimeLimit. (long (* dt 1e9)) nil gen)))

(defrecord Limit [remaining gen]
  Generator
  (op [_ test ctx]
    (when (pos? remaining)
      (when-let [[o g'] (op gen test ctx)]
        [o (Limit. (if (= :pending o) remaining (dec remaining)) g')])))
  (update [_ test ctx event] (Limit. remaining (update gen test ctx event))))

(defn limit [n gen] (when gen (Limit. n gen)))
(defn once [gen] (limit 1 gen))

(defrecord Repeat [gen]
  Generator
  (op [this test ctx]
    (when-let [[o _] (op gen test ctx)]
      [o this]))
  (update [_ test ctx event] (Repeat. (update gen test ctx event))))

(defn repeat
  "gen's first op, forever (gen itself does not advance)."
  [gen]
  (when gen (Repeat. gen)))
