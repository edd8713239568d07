// A job's log: the live tail, a search, and one record opened with the records around it.

import {h, clear, fmtClock} from "./dom.js";

const MAX_LINES = 5000;

// A progress bar (tqdm and the like) redraws its line with '\r'; in the terminal record mode each
// redraw arrives as a record of its own, so "Training:  10%|#   | 10/100" is followed by
// "Training:  20%|##  | 20/100" and so on. A terminal shows only the last redraw, and so do we: a
// record that looks like a progress bar (it holds "N%" or a bar between two '|') replaces the line
// before it when that line is from the same host, looked like a progress bar too and has the same
// text before its percentage or bar (the bar's label, "Training: " or "Epoch 3: "; digits count,
// so epoch 3's bar does not swallow epoch 2's). Metric lines such as "loss=0.5 | acc=0.9" differ
// before their first '|', so they never collapse. An empty record just before a bar goes too (the
// line the first '\r' returned over). A collapsed line says how many redraws it stands for.
const PROGRESS = /\d%|\|[^|]*\|/;

export function progressKey(message) {
  const found = PROGRESS.exec(message);
  if (!found) return null;
  let prefix = message.slice(0, found.index);
  if (found[0].endsWith("%")) prefix = prefix.replace(/[\d.]+$/, ""); // the number before '%' is the progress
  return prefix.trimEnd();
}

export class LogPane {
  constructor({multiHost = false, onOpen = null} = {}) {
    this.multiHost = multiHost;
    this.onOpen = onOpen; // a click on a record's number opens it with its context
    this.live = h("div", {class: "log-lines", "data-view": "live"});
    this.results = h("div", {class: "log-lines", "data-view": "search", hidden: true});
    this.status = h("span", {class: "log-status muted"});
    this.record = h("div", {class: "record-view", id: "record-view", hidden: true});
    this.follow = true;
    this.count = 0;
    this.box = h("div", {class: "log-box"}, this.live, this.results);
    this.box.addEventListener("scroll", () => {
      const {scrollTop, scrollHeight, clientHeight} = this.box;
      this.follow = scrollTop + clientHeight >= scrollHeight - 40;
    });
  }

  line(record, key) {
    const props = {class: "line", "data-record": record.Record, "data-host": record.Host};
    if (key !== null) props["data-progress"] = "";
    const number = {class: "ln", title: `${fmtClock(record.Timestamp)} · open with the records around it`};
    if (this.onOpen) number.onclick = () => this.onOpen(record);
    return h(
      "div",
      props,
      h("span", number, (this.multiHost ? record.Host + " " : "") + record.Record),
      h("span", {class: "ts"}, fmtClock(record.Timestamp)),
      h("span", {class: "msg"}, record.Message),
    );
  }

  /** Live records, in order. */
  append(records) {
    for (const record of records) {
      const key = progressKey(record.Message);
      const last = this.live.lastElementChild;
      const el = this.line(record, key);
      // an empty record just before a bar is the '\n' the '\r' redrew over: a terminal shows nothing there
      const blank = last && last.dataset.host === record.Host && last.empty;
      if (key !== null && last && last.dataset.host === record.Host && (last.progressKey === key || blank)) {
        const redraws = blank ? 1 : (last.redraws || 1) + 1;
        if (redraws > 1) {
          el.redraws = redraws;
          el.dataset.redraws = redraws;
          el.title = `${redraws} redraws of a progress bar; the last one shown`;
        }
        last.replaceWith(el);
      } else {
        this.live.append(el);
        this.count++;
      }
      el.progressKey = key;
      el.empty = record.Message === "";
    }
    while (this.live.childElementCount > MAX_LINES) this.live.firstElementChild.remove();
    if (this.follow && this.results.hidden) this.box.scrollTop = this.box.scrollHeight;
  }

  /** Search results instead of the tail (``null``: back to the tail). */
  showResults(records, note) {
    if (records === null) {
      this.results.hidden = true;
      this.live.hidden = false;
      this.status.textContent = "";
      this.box.scrollTop = this.box.scrollHeight;
      return;
    }
    clear(this.results, ...records.map((r) => this.line(r, null)));
    if (!records.length) this.results.append(h("p", {class: "muted"}, "No record matches."));
    this.results.hidden = false;
    this.live.hidden = true;
    this.status.textContent = note;
    this.box.scrollTop = 0;
  }

  /** One record (a chart point's) with the records around it, the record itself highlighted. */
  showRecord(answer) {
    const lines = answer.Records.map((r) =>
      h(
        "div",
        {class: "line" + (r.Record === answer.Record ? " target" : ""), "data-record": r.Record},
        h("span", {class: "ln", title: fmtClock(r.Timestamp)}, r.Record),
        h("span", {class: "msg"}, r.Message),
      ),
    );
    clear(
      this.record,
      h(
        "div",
        {class: "record-head"},
        h("strong", {}, `Record ${answer.Record}`),
        " ",
        h("span", {class: "muted"}, `${answer.Host} · ${answer.LogStreamName}`),
        h("button", {type: "button", class: "link", onclick: () => (this.record.hidden = true)}, "Close"),
      ),
      h("div", {class: "log-lines"}, lines),
    );
    this.record.hidden = false;
    this.record.scrollIntoView({block: "nearest"});
    const target = this.record.querySelector(".target");
    if (target) target.scrollIntoView({block: "center"});
  }
}
