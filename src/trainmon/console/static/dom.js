// DOM building and formatting. Every piece of data reaches the page as text (a text node or
// textContent), never as HTML: a job that prints "<script>" shows those characters.

/** An element: h("td", {class: "num", "data-x": 1, onclick: fn}, "text", child, [more]). */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key === "value" || key === "checked" || key === "disabled" || key === "selected") el[key] = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** A panel folded in a <details>: open as ``open`` says, unless the user opened or closed it
 * (``choices[key]``, kept by the caller across redraws). The choice is taken from a click on its
 * summary, not from the toggle event, which fires too when the page itself sets ``open``: a panel
 * drawn open for something to see would stay open once that was gone. */
export function foldedPanel(choices, key, open, props, summary, ...children) {
  const panel = h(
    "details",
    {...props, open: choices[key] ?? open},
    h("summary", {onclick: () => (choices[key] = !panel.open)}, summary),
    ...children,
  );
  return panel;
}

/** Empty ``el`` and put ``children`` in it (nulls skipped, strings as text). */
export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** Put ``children`` at the end of ``el``, as :func:`clear` puts them. */
export function extend(el, ...children) {
  append(el, children);
  return el;
}

/** A number as people read it; documents carry non-finite values as the strings "NaN", "Infinity". */
export function fmtNum(value) {
  if (value === undefined || value === null || value === "") return "–";
  if (typeof value === "string") return value;
  if (!Number.isFinite(value)) return String(value);
  if (Number.isInteger(value) && Math.abs(value) < 1e15) return String(value);
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-4 || abs >= 1e9)) return value.toExponential(3);
  return String(Number(value.toPrecision(6)));
}

const pad = (n) => String(n).padStart(2, "0");

/** Epoch seconds as a local date and time. */
export function fmtTime(seconds) {
  if (seconds === undefined || seconds === null) return "–";
  const d = new Date(seconds * 1000);
  return (
    `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`
  );
}

export function fmtClock(ms) {
  const d = new Date(ms);
  const millis = String(d.getMilliseconds()).padStart(3, "0");
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${millis}`;
}

/** Seconds as 12s, 3m05s, 2h01m. */
export function fmtDuration(seconds) {
  if (seconds === undefined || seconds === null || !Number.isFinite(seconds)) return "–";
  const sign = seconds < 0 ? "-" : "";
  let s = Math.abs(seconds);
  if (s < 60) return sign + (s < 10 && !Number.isInteger(s) ? s.toFixed(1) : Math.round(s)) + "s";
  s = Math.round(s);
  if (s < 3600) return `${sign}${Math.floor(s / 60)}m${pad(s % 60)}s`;
  if (s < 86400) return `${sign}${Math.floor(s / 3600)}h${pad(Math.floor(s / 60) % 60)}m`;
  return `${sign}${Math.floor(s / 86400)}d${pad(Math.floor(s / 3600) % 24)}h`;
}

export const TERMINAL = new Set(["Completed", "Failed", "Stopped"]);

// A size as people read it: 512 B, 3.4 KiB, 12.0 MiB, 1.2 GiB.
export function fmtBytes(bytes) {
  if (bytes === undefined || bytes === null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit ? `${value.toFixed(1)} ${units[unit]}` : `${value} B`;
}

// A value in its CloudWatch unit, as the CLI writes it: 42.5 %, 1.5 GiB, 3.2 MiB/s, 12 ms.
export function fmtUnit(value, unit) {
  if (value === null || value === undefined || typeof value !== "number" || !Number.isFinite(value))
    return fmtNum(value);
  if (unit === "Bytes" || unit === "Bytes/Second") {
    const suffix = unit === "Bytes/Second" ? "/s" : "";
    for (const [name, size] of [["TiB", 2 ** 40], ["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]])
      if (Math.abs(value) >= size) return `${+(value / size).toPrecision(3)} ${name}${suffix}`;
    return `${+value.toPrecision(4)} B${suffix}`;
  }
  const short = {Percent: "%", Milliseconds: "ms", Seconds: "s", Microseconds: "µs"}[unit];
  return short ? `${fmtNum(value)} ${short}` : fmtNum(value);
}

// A command line as a shell would read it back: each word that needs it in single quotes.
export function shellJoin(words) {
  return words.map((w) => (w !== "" && /^[\w@%+=:,./-]+$/.test(w) ? w : `'${w.replaceAll("'", "'\"'\"'")}'`)).join(" ");
}

/** A header's label, breakable after ":", "/", "." and "_" only, never inside a word. */
export function breakable(text) {
  return String(text)
    .split(/(?<=[:/._])/)
    .flatMap((part, i) => (i ? [h("wbr"), part] : [part]));
}

export function statusBadge(status) {
  return h("span", {class: "status", "data-status": status || "Unknown"}, status || "Unknown");
}

export function debounce(fn, ms) {
  let timer = null;
  const wrapped = (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
  wrapped.cancel = () => clearTimeout(timer);
  return wrapped;
}

/** ``fn`` at most once per ``ms``, and once more after the last call (a live stream's renders). */
export function throttle(fn, ms) {
  let timer = null;
  let last = 0;
  const wrapped = () => {
    if (timer) return;
    const wait = Math.max(0, last + ms - Date.now());
    timer = setTimeout(() => {
      timer = null;
      last = Date.now();
      fn();
    }, wait);
  };
  wrapped.cancel = () => {
    clearTimeout(timer);
    timer = null;
  };
  return wrapped;
}

/** A table from a header row and rows of cells (strings, numbers or nodes). */
export function table(headers, rows, props = {}) {
  return h(
    "table",
    props,
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        headers.map((x) => h("th", {}, x)),
      ),
    ),
    h(
      "tbody",
      {},
      rows.map((cells) =>
        h(
          "tr",
          {},
          cells.map((c) => h("td", typeof c === "number" ? {class: "num"} : {}, typeof c === "number" ? fmtNum(c) : c)),
        ),
      ),
    ),
  );
}

/** The definitions' warnings as a list, or nothing when there are none. */
export function warningList(warnings) {
  return warnings.length
    ? h(
        "ul",
        {class: "definition-warnings"},
        warnings.map((w) => h("li", {}, w)),
      )
    : null;
}

/** A form field: its label, the input, and a line of help under it. */
export function field(label, input, help) {
  return h(
    "label",
    {class: "field"},
    h("span", {class: "label"}, label),
    input,
    help ? h("span", {class: "help"}, help) : null,
  );
}

export function section(title, ...children) {
  return h("section", {class: "panel"}, h("h2", {}, title), ...children);
}

/**
 * The dialog that asks before stopping something: ``title``, ``explanation`` (nodes or text),
 * and the button ``confirm`` that runs ``stop`` (an async function), closes the dialog, then runs
 * ``done``; an error stays in the dialog.
 */
export function stopDialog({title, explanation, confirm, stop, done}) {
  const message = h("p", {class: "error"});
  const dialog = h(
    "dialog",
    {class: "confirm", id: "stop-dialog"},
    h("h2", {}, title),
    h("p", {}, ...explanation),
    message,
    h(
      "div",
      {class: "actions"},
      h("button", {type: "button", name: "cancel", onclick: () => dialog.close()}, "Cancel"),
      h(
        "button",
        {
          type: "button",
          class: "danger",
          name: "confirm",
          onclick: async (e) => {
            e.target.disabled = true;
            try {
              await stop();
              dialog.close();
              await done();
            } catch (exc) {
              message.textContent = exc.message;
            } finally {
              e.target.disabled = false;
            }
          },
        },
        confirm,
      ),
    ),
  );
  return dialog;
}

const TUNING_ARN = "hyper-parameter-tuning-job/";

/** The name of the tuning job whose trial ``job`` is (null: none). The ARN has it lower-cased; the
 * trial's own name starts with it as it was given ("NAME-NNN-xxxxxxxx"), which is taken when the two
 * agree. */
export function tuningJobOf(job) {
  const arn = job.TuningJobArn || "";
  const at = arn.indexOf(TUNING_ARN);
  if (at < 0) return null;
  const lower = arn.slice(at + TUNING_ARN.length);
  const prefix = /^(.+)-\d{3,}-[0-9a-z]+$/i.exec(job.TrainingJobName || "")?.[1];
  return prefix && prefix.toLowerCase() === lower.toLowerCase() ? prefix : lower;
}
