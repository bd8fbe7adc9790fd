(ns jepsen.util
  "STAND-IN for the part of Jepsen 0.3.x's jepsen.util the bridge uses (its tests only):
  rand-distribution, which jepsen.nemesis.combined applies to file corruptions'
  :probability and :drop maps before emitting an op. Same distribution maps, same
  validation; the sampling is this file's own (zipf by inverse CDF, not Jepsen's
  rejection sampler).")

(defn- zipf [n skew]
  (let [weights (map #(/ 1.0 (Math/pow (inc %) skew)) (range n))
        r       (* (rand) (reduce + weights))]
    (loop [i 0, acc 0.0, [w & more] weights]
      (if (or (nil? more) (< r (+ acc w))) i (recur (inc i) (+ acc w) more)))))

(defn rand-distribution
  "A random value from a distribution map: {:distribution :uniform, :min 0, :max 1024}
  (default), {:distribution :geometric, :p 1e-3} (mean 1/p), {:distribution :zipf, :n 10,
  :skew 1.5} (an integer in [0, n)), {:distribution :one-of, :values [..]},
  {:distribution :weighted, :weights {value weight ..}}."
  ([] (rand-distribution {}))
  ([{:keys [distribution min max p n skew values weights] :as m}]
   (let [distribution (or distribution :uniform)
         lo (or min 0)
         hi (or max Long/MAX_VALUE)]
     (assert (case distribution
               :uniform   (< lo hi)
               :geometric (number? p)
               :zipf      (and (integer? n) (or (nil? skew) (number? skew)))
               :one-of    (seq values)
               :weighted  (and (map? weights) (every? number? (vals weights)))
               false)
             (str "Invalid distribution-map: " m))
     (case distribution
       :uniform   (long (Math/floor (+ lo (* (rand) (- hi lo)))))
       :geometric (long (Math/ceil (/ (Math/log (rand)) (Math/log (- 1.0 p)))))
       :zipf      (if (zero? n) 0 (zipf n (or skew 1.0001)))
       :one-of    (rand-nth (vec values))
       :weighted  (let [r (* (rand) (reduce + (vals weights)))]
                    (loop [[[v w] & more] (seq weights), acc 0.0]
                      (if (or (nil? more) (< r (+ acc w))) v (recur more (+ acc w)))))))))
