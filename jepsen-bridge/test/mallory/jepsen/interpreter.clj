(ns mallory.jepsen.interpreter
  "Test support (not a stand-in of a Jepsen namespace): runs a generator the way Jepsen
  0.3.x's jepsen.generator.interpreter/run! does, in one thread, so the bridge can be
  tested composed as its README composes it.

  Threads 0..concurrency-1 run client processes (initially the thread's own number), the
  :nemesis thread the nemesis. Each turn first completes an op whose worker is done, else
  asks the generator: nil ends the run once nothing is in flight; :pending waits 1 ms and
  asks the same generator again; an op due later waits and asks again; an op due now is
  recorded, its thread marked busy, and the generator it came with is updated with the
  invocation. A worker is done with its op once the generator has been asked at least once
  more (as in Jepsen, where an op is in flight while the interpreter goes on asking); only
  then does the worker perform it (`invoke-client` / `invoke-nemesis`), and the generator is
  updated with the completion, the thread free. A client op completed :info (or thrown)
  retires its process: the thread takes process + concurrency."
  (:refer-clojure :exclude [run!])
  (:require [jepsen.generator :as gen]))

(defn context [concurrency time]
  (let [threads (conj (vec (range concurrency)) :nemesis)]
    {:time time, :free-threads (set threads), :workers (zipmap threads threads)}))

(defn run!
  "Drives `generator` to exhaustion. Options: :concurrency (default 2), :invoke-client
  (fn [test op] completion), :invoke-nemesis (fn [test op] completion, default the op as
  :info), :timeout-ms (default 60000). Returns the history: invocations and completions in
  the order they happened, each with :index."
  [test generator {:keys [concurrency invoke-client invoke-nemesis timeout-ms]
                   :or {concurrency 2, timeout-ms 60000
                        invoke-nemesis (fn [_ op] (assoc op :type :info))}}]
  (let [t0       (System/nanoTime)
        now      #(- (System/nanoTime) t0)
        deadline (+ (System/currentTimeMillis) timeout-ms)
        perform  (fn [op]
                   (if (= :nemesis (:process op))
                     (invoke-nemesis test op)
                     (try (invoke-client test op)
                          (catch Exception e (assoc op :type :info, :error (.getMessage e))))))]
    (loop [ctx (context concurrency (now)), g generator, history [], in-flight []]
      (when (> (System/currentTimeMillis) deadline)
        (throw (ex-info "interpreter: the generator did not finish in time"
                        {:history history, :in-flight in-flight})))
      (if-let [op (some #(when (:asked-since? %) (:op %)) in-flight)]
        (let [thread (gen/process->thread ctx (:process op))
              time   (now)
              done   (assoc (perform op) :time time :index (count history))
              ctx    (-> ctx (assoc :time time) (update :free-threads conj thread))
              g      (gen/update g test ctx done)
              ctx    (if (and (not= :nemesis thread) (= :info (:type done)))
                       (update-in ctx [:workers thread] + concurrency)
                       ctx)]
          (recur ctx g (conj history done) (vec (remove #(= op (:op %)) in-flight))))
        (let [ctx       (assoc ctx :time (now))
              [o g']    (gen/op g test ctx)
              in-flight (mapv #(assoc % :asked-since? true) in-flight)]
          (cond
            (nil? o)        (if (empty? in-flight)
                              history
                              (recur ctx g history in-flight))
            (= :pending o)  (do (Thread/sleep 1) (recur ctx g history in-flight))
            (< (:time ctx) (:time o)) (do (Thread/sleep 1) (recur ctx g history in-flight))
            :else
            (let [thread (gen/process->thread ctx (:process o))
                  _      (when-not (contains? (:free-threads ctx) thread)
                           (throw (ex-info "interpreter: an op for a busy or unknown thread" {:op o})))
                  o      (assoc o :index (count history))
                  ctx    (update ctx :free-threads disj thread)]
              (recur ctx (gen/update g' test ctx o) (conj history o)
                     (conj in-flight {:op o, :asked-since? false})))))))))
