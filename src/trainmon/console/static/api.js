// The server's JSON API and its live streams. Requests are same-origin, so the login cookie (on a
// server that needs a token) goes with them.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export async function request(method, path, {params, body} = {}) {
  const url = new URL(path, location.origin);
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, value);
  }
  const init = {method, headers: {Accept: "application/json"}};
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(url, init);
  } catch (exc) {
    throw new ApiError(0, "NetworkError", `the server cannot be reached (${exc.message}).`);
  }
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (response.status === 401 && !path.startsWith("/login")) {
    location.assign("/login"); // a server that needs its token, and our cookie is gone
  }
  if (!response.ok) {
    const error = (data && data.error) || {};
    throw new ApiError(
      response.status,
      error.code || "HTTPError",
      error.message || `${response.status} ${response.statusText}`,
    );
  }
  return data;
}

/** Jobs one request of several jobs' descriptions or points may name (the server's limit). */
export const MANY_JOBS = 50;

/** ``list`` in pieces of at most ``size``, in order. */
export function inPieces(list, size) {
  const pieces = [];
  for (let i = 0; i < list.length; i += size) pieces.push(list.slice(i, i + size));
  return pieces;
}

export const get = (path, params) => request("GET", path, {params});
export const post = (path, body) => request("POST", path, {body: body || {}});

/** /api/jobs/NAME/PART/PART..., each part escaped. */
export function jobPath(name, ...parts) {
  return ["/api/jobs", name, ...parts].map((p, i) => (i === 0 ? p : encodeURIComponent(p))).join("/");
}

/** A live stream that comes back after a dropped connection, from where it was: ``url()`` is asked
 * again at each (re)connection, so it can carry the latest positions. ``handlers`` maps event names
 * to functions of the parsed data; the events in ``closeOn`` close it. */
export function liveStream(url, handlers, {closeOn = ["end", "deleted"]} = {}) {
  let source = null;
  let closed = false;
  let retry = null;
  const connect = () => {
    if (closed) return;
    source = new EventSource(url());
    for (const [name, handle] of Object.entries(handlers)) {
      source.addEventListener(name, (event) => {
        if (closed) return;
        let data;
        try {
          data = JSON.parse(event.data);
        } catch {
          return;
        }
        handle(data);
        if (closeOn.includes(name)) stop();
      });
    }
    source.onerror = () => {
      // our own reconnection, so that it starts from the positions we have now, not the first URL's
      source.close();
      if (!closed) retry = setTimeout(connect, 1500);
    };
  };
  const stop = () => {
    closed = true;
    clearTimeout(retry);
    if (source) source.close();
  };
  connect();
  return {close: stop};
}

/** A points answer (or an SSE ``points`` member) as the columns charts use: ``t`` epoch ms, ``v``
 * values (null where not finite), ``k`` the non-finite value's name ("NaN", "Infinity",
 * "-Infinity") or null, and the log ``stream`` and ``record`` each point came from. */
export function series(payload) {
  const t = payload.TimestampDeltas ? undelta(payload.TimestampDeltas) : (payload.Timestamps || []).slice();
  const k = new Array(t.length).fill(null);
  for (const [index, kind] of Object.entries(payload.NonFinite || {})) k[Number(index)] = kind;
  return {
    t,
    v: (payload.Values || []).slice(),
    k,
    stream: (payload.Stream || []).slice(),
    record: (payload.Record || []).slice(),
    count: payload.Count ?? t.length,
  };
}

/** Times sent as differences (``times=delta``: the first, then each from the one before) made whole. */
function undelta(deltas) {
  const t = new Array(deltas.length);
  let at = 0;
  for (let i = 0; i < deltas.length; i++) t[i] = at += deltas[i];
  return t;
}

/** A GetMetricStatistics answer as columns (no log records: a statistic summarises many). */
export function statisticSeries(answer, stat) {
  const points = (answer.Datapoints || []).slice().sort((a, b) => a.Timestamp - b.Timestamp);
  const out = {t: [], v: [], k: [], stream: [], record: [], count: points.length};
  for (const p of points) {
    const value = p[stat] ?? (p.ExtendedStatistics || {})[stat];
    out.t.push(Math.round(p.Timestamp * 1000));
    out.v.push(typeof value === "number" ? value : null);
    out.k.push(typeof value === "string" ? value : null);
  }
  return out;
}
