(ns mallory.jepsen.mediator
  "Talks to Mallory's mediator over HTTP in EDN, with nothing but Clojure and the JDK's
  java.net.http client.

  Every call carries the mediator's token and has a timeout. A refused request throws
  ex-info {:type ::rejected, :status, :reason} with the mediator's own reason; a mediator
  that cannot be reached throws ex-info {:type ::unreachable, :url} saying so, and one that
  does not answer in time ex-info {:type ::timeout, :url, :path}.

  Client operations are relayed asynchronously: `relay-op!` only offers the op to a
  bounded queue, and a background thread posts what has queued up to /client/batch every
  `:relay-interval-ms`. A slow or dead mediator never slows the workload: when the queue
  is full, ops are dropped and counted (see `relay-stats`)."
  (:require [clojure.edn :as edn])
  (:import (java.io IOException)
           (java.net URI)
           (java.net.http HttpClient HttpRequest HttpRequest$BodyPublishers
                          HttpResponse HttpResponse$BodyHandlers HttpTimeoutException)
           (java.time Duration)
           (java.util ArrayList)
           (java.util.concurrent ArrayBlockingQueue TimeUnit)
           (java.util.concurrent.atomic AtomicLong)))

(def defaults
  {:timeout-ms        5000   ; per request; /advisor/next also waits for its window
   :connect-timeout-ms 2000
   :relay-interval-ms 50     ; how long relayed ops may wait before they are posted
   :relay-capacity    10000  ; queued ops beyond this are dropped, not waited for
   :relay-batch       1000}) ; the mediator's limit per /client/batch

(defn- reason [^String body]
  (try (let [m (edn/read-string body)]
         (if (map? m) (or (:error m) body) body))
       (catch Exception _ body)))

(defn request!
  "POSTs (or GETs, when body is nil) `body` as EDN to `path`; returns the EDN answer.
  Options: :timeout-ms for this call."
  ([conn path body] (request! conn path body {}))
  ([{:keys [url token ^HttpClient http timeout-ms]} path body opts]
   (let [uri     (URI/create (str url path))
         builder (-> (HttpRequest/newBuilder uri)
                     (.timeout (Duration/ofMillis (:timeout-ms opts timeout-ms)))
                     (.header "X-Mallory-Token" token)
                     (.header "Accept" "application/edn"))
         req     (if (nil? body)
                   (.build (.GET builder))
                   (-> builder
                       (.header "Content-Type" "application/edn")
                       (.POST (HttpRequest$BodyPublishers/ofString (pr-str body)))
                       (.build)))
         ^HttpResponse resp
         (try (.send http req (HttpResponse$BodyHandlers/ofString))
              (catch HttpTimeoutException e
                (throw (ex-info (str "mallory: mediator at " url " did not answer " path " within "
                                     (:timeout-ms opts timeout-ms) " ms")
                                {:type ::timeout :url url :path path} e)))
              (catch IOException e
                (throw (ex-info (str "mallory: mediator at " url " unreachable (" path "): "
                                     (or (.getMessage e) (.getName (class e)))
                                     ". Is `mallory mediator --advisor` running there?")
                                {:type ::unreachable :url url :path path} e))))
         status (.statusCode resp)
         text   (.body resp)]
     (if (= 200 status)
       (edn/read-string text)
       (throw (ex-info (str "mallory: mediator refused " path ": " status " " (reason text))
                       {:type ::rejected :status status :path path :reason (reason text)}))))))

;; -- the client-op relay --------------------------------------------------------------------

(defn- op-name [x] (if (keyword? x) (name x) (str x)))

(def ^:private op-types #{"invoke" "ok" "fail" "info"})

(defn- relayable
  "The op as the mediator takes it, or nil when it cannot take it (one bad op would make
  the mediator refuse its whole batch)."
  [{:keys [process type f]}]
  (let [type (op-name type), f (op-name f)]
    (when (and (integer? process) (not (neg? process)) (op-types type)
               (< 0 (count f) 65))
      {:process process, :type (keyword type), :f f})))

(defn relay-op!
  "Queues a client op (a Jepsen op map: :process, :type, :f) for the mediator. Never blocks;
  returns false when the op was dropped (queue full, relay closed, or not a client op)."
  [{:keys [^ArrayBlockingQueue queue stats running last-error]} op]
  (let [wire (relayable op)]
    (if (and wire @running (.offer queue wire))
      (do (.incrementAndGet ^AtomicLong (:queued stats)) true)
      (do (.incrementAndGet ^AtomicLong (:dropped stats))
          (when-not wire
            (reset! last-error (str "not a relayable client op: " (pr-str (select-keys op [:process :type :f])))))
          false))))

(defn- post-batch! [{:keys [stats last-error] :as conn} ops]
  (try (request! conn "/client/batch" {:ops ops})
       (.addAndGet ^AtomicLong (:sent stats) (count ops))
       (catch Exception e
         (.addAndGet ^AtomicLong (:failed stats) (count ops))
         (reset! last-error (.getMessage e)))))

(defn- drain!
  "Posts everything queued, in order. Posting happens only under :post-lock, so ops reach
  the mediator in the order they were queued even when `flush!` races the relay thread."
  [{:keys [^ArrayBlockingQueue queue relay-batch post-lock] :as conn}]
  (locking post-lock
    (loop []
      (let [batch (ArrayList.)]
        (.drainTo queue batch (int relay-batch))
        (when (pos? (.size batch))
          (post-batch! conn (vec batch))
          (recur))))))

(defn- relay-loop
  "The relay thread: every :relay-interval-ms, posts what has queued up; at close, the rest."
  [{:keys [running relay-interval-ms] :as conn}]
  (try
    (while @running
      (Thread/sleep (long relay-interval-ms))
      (drain! conn))
    (catch InterruptedException _
      (reset! running false)))
  (drain! conn))

(defn flush!
  "Posts every op queued so far, on the caller's thread."
  [conn]
  (drain! conn))

(defn connect
  "A connection to the mediator at `:url` (e.g. \"http://10.0.0.1:7000\") with `:token`.
  Starts the relay thread; `close!` stops it after posting what is queued."
  [opts]
  (let [{:keys [url token connect-timeout-ms relay-capacity] :as opts} (merge defaults opts)]
    (when-not (and (string? url) (re-matches #"https?://[^/\s]+/?" url))
      (throw (ex-info (str "mallory: :url must look like http://host:port, got " (pr-str url))
                      {:type ::bad-config :url url})))
    (when-not (and (string? token) (seq token))
      (throw (ex-info "mallory: :token must be the mediator's non-empty API token"
                      {:type ::bad-config})))
    (let [conn (assoc opts
                      :url (if (.endsWith ^String url "/") (subs url 0 (dec (count url))) url)
                      :http (-> (HttpClient/newBuilder)
                                (.connectTimeout (Duration/ofMillis connect-timeout-ms))
                                (.build))
                      :queue (ArrayBlockingQueue. (int relay-capacity))
                      :stats {:queued (AtomicLong.) :sent (AtomicLong.)
                              :dropped (AtomicLong.) :failed (AtomicLong.)}
                      :last-error (atom nil)
                      :post-lock (Object.)
                      :reporter (agent 0)
                      :running (atom true))]
      (assoc conn :relay (doto (Thread. ^Runnable (fn [] (relay-loop conn))
                                        "mallory-relay")
                           (.setDaemon true)
                           (.start))))))

;; -- the test's life cycle and the advisor ------------------------------------------------

(defn start-test! [conn test-name]
  (request! conn "/test/start" {:name (str test-name)}))

(defn end-test!
  "Posts the ops still queued, then ends the test (the learner checkpoints)."
  [conn]
  (flush! conn)
  (request! conn "/test/end" {}))

(defn send-catalogue!
  "Declares the actions (strings) the advisor may choose from."
  [conn actions]
  (request! conn "/advisor/catalogue" {:actions (vec actions)}))

(defn next-fault!
  "The learner's next action, judged on the window since the previous ask. Blocks until the
  mediator has that window complete (its own wait), hence the longer default timeout."
  [conn]
  (request! conn "/advisor/next" {} {:timeout-ms (max (:timeout-ms conn) 10000)}))

(defn report-fault!
  "Tells the mediator a fault was enacted: it enters the timeline as a FAULT event."
  [conn f]
  (request! conn "/nemesis" {:f (name f)}))

(defn report-fault-async!
  "Like report-fault!, but on the connection's own agent: reports reach the mediator in the
  order they were made and never hold up the caller; a failure is kept as :last-error."
  [{:keys [reporter last-error] :as conn} f]
  (send-off reporter (fn [n]
                       (try (report-fault! conn f) (inc n)
                            (catch Exception e (reset! last-error (.getMessage e)) n)))))

(defn await-reports
  "Waits (at most timeout-ms) until every fault reported so far has been sent; the count sent."
  [{:keys [reporter timeout-ms]}]
  (await-for timeout-ms reporter)
  @reporter)

(defn status [conn] (request! conn "/status" nil))

(defn relay-stats
  "{:queued :sent :dropped :failed :last-error} of the relay so far."
  [{:keys [stats last-error]}]
  (assoc (into {} (map (fn [[k ^AtomicLong v]] [k (.get v)]) stats))
         :last-error @last-error))

(defn close!
  "Stops the relay after it posted what was queued (waits at most `timeout-ms`)."
  [{:keys [running ^Thread relay timeout-ms]}]
  (reset! running false)
  (.join relay (long timeout-ms)))
