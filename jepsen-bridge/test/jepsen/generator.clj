(ns jepsen.generator
  "STAND-IN for Jepsen 0.3.x's jepsen.generator, used only by the bridge's tests (Jepsen's
  jars cannot be fetched here). The Generator protocol has Jepsen's exact signatures:

    (op gen test ctx)           => [op gen'] | [:pending gen] | nil
    (update gen test ctx event) => gen'

  Maps are one-shot generators filled in from the context as Jepsen's fill-in-op does
  (:time, :type :invoke, :process of a free thread; :pending when no thread is free),
  except that the result is a plain map where Jepsen builds a jepsen.history.Op.
  A context here is {:time ns, :free-threads #{thread}, :workers {thread process}}.
  phases/nemesis/stagger/time-limit only record how they were composed: enough to compile
  and inspect the README's wiring, not to run it."
  (:refer-clojure :exclude [update]))

(defprotocol Generator
  (update [gen test context event]
    "Updates the generator to reflect an event having taken place.")
  (op [gen test context]
    "Obtains the next operation: [op gen'], [:pending gen], or nil when exhausted."))

(defn some-free-process
  "A process of some free thread, or nil."
  [ctx]
  (some (:workers ctx) (sort-by str (:free-threads ctx))))

(defn fill-in-op [op ctx]
  (if-let [p (some-free-process ctx)]
    (merge {:time (:time ctx), :type :invoke, :process p} op)
    :pending))

(extend-protocol Generator
  nil
  (update [gen test ctx event] nil)
  (op [gen test ctx] nil)

  clojure.lang.APersistentMap
  (update [this test ctx event] this)
  (op [this test ctx]
    (let [op (fill-in-op this ctx)]
      [op (if (= :pending op) this nil)])))

(defn phases [& gens] {:stand-in :phases, :gens (vec gens)})
(defn nemesis ([nemesis-gen] {:stand-in :nemesis, :nemesis nemesis-gen})
  ([nemesis-gen client-gen] {:stand-in :nemesis, :nemesis nemesis-gen, :clients client-gen}))
(defn stagger [dt gen] {:stand-in :stagger, :dt dt, :gen gen})
(defn time-limit [dt gen] {:stand-in :time-limit, :dt dt, :gen gen})
