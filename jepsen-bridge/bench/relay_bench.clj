(ns mallory.jepsen.relay-bench
  "Relaying client ops to the mediator: what one relay-op! costs the calling worker, how
  many ops/s the batched relay delivers, against one POST /client per op (the baseline, in
  the same run). Run by bench/bench_jepsen_relay.py; prints one EDN map."
  (:require [mallory.jepsen.mediator :as m]))

(def conn (m/connect {:url (System/getenv "MALLORY_URL") :token (System/getenv "MALLORY_TOKEN")}))
(def batched-n (Long/parseLong (or (first *command-line-args*) "8000")))
(def single-n (Long/parseLong (or (second *command-line-args*) "1000")))
(defn- op [i] {:process (mod i 10), :type (if (even? i) :invoke :ok), :f :write})

(defn- wait-sent
  "Until every queued op was posted (or failed): dropped ops never will be."
  []
  (while (let [{:keys [queued sent failed]} (m/relay-stats conn)] (< (+ sent failed) queued))
    (Thread/sleep 1)))

(defn- batched [n]
  (let [t0 (System/nanoTime)]
    (dotimes [i n] (m/relay-op! conn (op i)))
    (let [t1 (System/nanoTime)]
      (wait-sent)
      {:call-ns (/ (- t1 t0) (double n)), :total-s (/ (- (System/nanoTime) t0) 1e9)})))

(defn- single [n]
  (let [t0 (System/nanoTime)]
    (dotimes [i n]
      (let [{:keys [process type f]} (op i)]
        (m/request! conn "/client" {:process process, :type type, :f (name f)})))
    (/ (- (System/nanoTime) t0) 1e9)))

;; warm-up (JIT, connections), then measure
(binding [*out* *err*] (println "warm-up" (batched 2000) (single 200) (m/relay-stats conn)))
(let [b (batched batched-n)
      s (single single-n)]
  (prn {:batched-n batched-n, :relay-op-call-us (/ (:call-ns b) 1000)
        :batched-ops-per-s (/ batched-n (:total-s b))
        :single-n single-n, :single-ops-per-s (/ single-n s)
        :dropped (:dropped (m/relay-stats conn)), :failed (:failed (m/relay-stats conn))}))
(m/close! conn)
(shutdown-agents)
