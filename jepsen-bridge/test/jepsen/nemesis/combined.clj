(ns jepsen.nemesis.combined
  "STAND-IN for Jepsen 0.3.x's jepsen.nemesis.combined (the bridge's tests only): packages
  with the stock :perf maps, and a :generator / :final-generator exactly when the stock
  package would have one (its fault is in :faults). Generators and nemeses are markers;
  composition follows compose-packages (final generators in order, perf sets unioned)."
  (:require [clojure.set :as set]))

(def noop {:generator nil, :final-generator nil, :nemesis :noop, :perf #{}})

(defn- package [needed? gen final nemesis perf]
  {:generator (when needed? gen), :final-generator (when needed? final),
   :nemesis nemesis, :perf perf})

(defn nemesis-packages [opts]
  (let [faults (set (:faults opts [:partition :packet :kill :pause :clock :file-corruption]))]
    [(package (faults :partition) [:stand-in :partition-gen] {:type :info, :f :stop-partition, :value nil}
              :partition-nemesis
              #{{:name "partition", :start #{:start-partition}, :stop #{:stop-partition}, :color "#E9DCA0"}})
     (package (faults :packet) [:stand-in :packet-gen] {:type :info, :f :stop-packet, :value nil}
              :packet-nemesis
              #{{:name "packet", :start #{:start-packet}, :stop #{:stop-packet}, :color "#D1E8A0"}})
     (assoc (package (faults :file-corruption) [:stand-in :file-gen] nil :file-corruption-nemesis
                     #{{:name "file-corruption", :fs #{:bitflip :truncate}, :start #{}, :stop #{}, :color "#99F2E2"}})
            :final-generator nil)
     (package (faults :clock) [:stand-in :clock-gen] {:type :info, :f :reset-clock}
              :clock-nemesis
              #{{:name "clock", :start #{:bump-clock}, :stop #{:reset-clock}, :fs #{:strobe-clock}, :color "#A0E9E3"}})
     (package (some faults [:kill :pause]) [:stand-in :db-gen]
              (cond-> [] (faults :pause) (conj {:type :info, :f :resume, :value :all})
                         (faults :kill) (conj {:type :info, :f :start, :value :all}))
              :db-nemesis
              #{{:name "kill", :start #{:kill}, :stop #{:start}, :color "#E9A4A0"}
                {:name "pause", :start #{:pause}, :stop #{:resume}, :color "#A0B1E9"}})]))

(defn compose-packages [packages]
  (case (count packages)
    0 noop
    1 (first packages)
    {:generator       [:stand-in :any (vec (keep :generator packages))]
     :final-generator (keep :final-generator packages)
     :nemesis         [:stand-in :compose (vec (keep :nemesis packages))]
     :perf            (reduce set/union (map :perf packages))}))

(defn nemesis-package [opts]
  (compose-packages (nemesis-packages opts)))
