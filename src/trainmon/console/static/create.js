// The new-job page: a CreateTrainingJob request from a form, with a live tester of the metric
// definitions over pasted sample output.

import {get, post, ApiError} from "./api.js";
import {h, clear, fmtNum, debounce, field, warningList} from "./dom.js";
import {navigate} from "./router.js";

/** A command line as its words, as a POSIX shell splits it (quotes and backslashes; no expansion). */
export function splitCommand(line) {
  const words = [];
  let word = "",
    inWord = false,
    quote = null;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (quote === "'") {
      if (c === "'") quote = null;
      else word += c;
    } else if (quote === '"') {
      if (c === '"') quote = null;
      else if (c === "\\" && i + 1 < line.length && '"\\$`'.includes(line[i + 1])) word += line[++i];
      else word += c;
    } else if (c === "'" || c === '"') {
      quote = c;
      inWord = true;
    } else if (c === "\\" && i + 1 < line.length) {
      word += line[++i];
      inWord = true;
    } else if (/\s/.test(c)) {
      if (inWord) words.push(word);
      word = "";
      inWord = false;
    } else {
      word += c;
      inWord = true;
    }
  }
  if (quote) throw new Error(`the command has an unclosed ${quote} quote.`);
  if (inWord) words.push(word);
  return words;
}

function defaultName() {
  const d = new Date();
  const p = (n) => String(n).padStart(2, "0");
  const day = `${d.getFullYear()}${p(d.getMonth() + 1)}${p(d.getDate())}`;
  return `job-${day}-${p(d.getHours())}${p(d.getMinutes())}${p(d.getSeconds())}`;
}

/** Rows of inputs with an add and a remove button. */
function rows(kind, fields, onChange) {
  const body = h("div", {class: "rows", "data-rows": kind});
  const add = (values = {}) => {
    const row = h(
      "div",
      {class: "row", "data-row": kind},
      fields.map(([name, placeholder, cls]) =>
        h("input", {
          type: "text",
          name,
          placeholder,
          class: cls || "",
          value: values[name] || "",
          oninput: onChange,
          spellcheck: "false",
        }),
      ),
      h(
        "button",
        {
          type: "button",
          class: "link remove",
          "aria-label": "remove",
          onclick: () => {
            row.remove();
            onChange();
          },
        },
        "Remove",
      ),
    );
    body.append(row);
    return row;
  };
  const values = () =>
    [...body.querySelectorAll(".row")].map((row) =>
      Object.fromEntries(fields.map(([name]) => [name, row.querySelector(`[name="${name}"]`).value])),
    );
  const el = h(
    "div",
    {},
    body,
    h("button", {type: "button", class: "link add", name: `add-${kind}`, onclick: () => add()}, `+ Add`),
  );
  return {el, add, values, rows: () => [...body.querySelectorAll(".row")]};
}

export function mount(root) {
  document.title = "New job · trainmon";
  const name = h("input", {type: "text", name: "name", value: defaultName(), required: true, spellcheck: "false"});
  const kind = h(
    "select",
    {name: "run-kind"},
    h("option", {value: "command"}, "Command"),
    h("option", {value: "image"}, "Your own algorithm container"),
  );
  const images = h("datalist", {id: "local-images"});
  const command = h("input", {
    type: "text",
    name: "command",
    placeholder: "python3 train.py --epochs 3",
    spellcheck: "false",
    class: "wide",
  });
  const runHelp = h("span", {class: "help"});
  const arguments_ = h("input", {
    type: "text",
    name: "container-arguments",
    placeholder: "train",
    spellcheck: "false",
    class: "wide",
  });
  const argumentsField = field("Container arguments", arguments_, "instead of train, as a shell splits them");
  const directory = h("input", {
    type: "text",
    name: "directory",
    placeholder: "/home/me/project",
    spellcheck: "false",
    class: "wide",
  });
  const directoryField = field(
    "Directory",
    directory,
    "where the command runs, on the server's machine (relative paths such as train.py are read there); " +
      "empty: the directory the server was started in",
  );
  function showKind() {
    const image = kind.value === "image";
    command.placeholder = image ? "my-algo:latest, or 123456789012.dkr.ecr.us-west-2.amazonaws.com/my-algo:latest" :
      "python3 train.py --epochs 3";
    if (image) command.setAttribute("list", "local-images");
    else command.removeAttribute("list");
    runHelp.textContent = image ?
      "an image, run as a container under SageMaker's contract with train as its argument (or a directory " +
        "with an executable train); the images on this machine are offered as you type" :
      "a command line, split into words as a shell would (quotes respected)";
    argumentsField.hidden = !image;
    directoryField.hidden = image;
  }
  kind.addEventListener("change", showKind);
  showKind();
  get("/api/images").then(
    (found) => images.replaceChildren(...found.Images.filter((i) => !/^[0-9a-f]+$/.test(i.Name))
      .map((i) => h("option", {value: i.Name}, `${i.Size}, ${i.Created}`))),
    () => {}, // no container engine here: a command still runs
  );
  const count = h("input", {type: "number", name: "instance-count", min: 1, max: 64, value: 1});
  const runtime = h("input", {type: "number", name: "max-runtime", min: 1, placeholder: "86400"});
  const hyper = rows(
    "hyperparameter",
    [
      ["key", "name"],
      ["value", "value"],
    ],
    () => {},
  );
  const channels = rows(
    "channel",
    [
      ["channel", "name (e.g. train)"],
      ["path", "local path", "wide"],
    ],
    () => {},
  );
  const tester = h("div", {class: "tester", "aria-live": "polite"});
  const sample = h("textarea", {
    name: "sample",
    rows: 6,
    spellcheck: "false",
    placeholder: "Paste some of the job's output here to see what each definition extracts.",
  });
  const error = h("p", {class: "error form-error", hidden: true});
  const submit = h("button", {type: "submit", class: "primary", name: "create"}, "Create job");

  let testToken = 0;
  let lastTest = null; // the latest answer of the tester, and the definitions it was for
  let warnedEmpty = ""; // the definitions a "matched nothing" warning was shown for
  const definitionsNow = () =>
    metrics
      .values()
      .filter((d) => d.Name || d.Regex)
      .map((d) => ({Name: d.Name, Regex: d.Regex}));
  // the editor's rows that are definitions, numbered as the API numbers them (MetricDefinitions[n])
  function numberRows() {
    let n = 0;
    const given = [];
    for (const row of metrics.rows()) {
      const filled = [...row.querySelectorAll("input")].some((i) => i.value);
      row.dataset.position = filled ? String(++n) : "";
      row.classList.remove("invalid");
      row.removeAttribute("title");
      if (filled) given.push(row);
    }
    return given;
  }
  const test = debounce(async () => {
    const token = ++testToken;
    numberRows();
    const definitions = definitionsNow();
    lastTest = null;
    if (!definitions.length || !sample.value) {
      clear(
        tester,
        h(
          "p",
          {class: "muted"},
          definitions.length ? "Paste sample output to test the definitions." : "Add a metric definition to test it.",
        ),
      );
      return;
    }
    tester.dataset.state = "testing";
    try {
      const answer = await post("/api/definitions/test", {MetricDefinitions: definitions, LogText: sample.value});
      if (token === testToken) {
        lastTest = {answer, definitions: JSON.stringify(definitions)};
        showTest(answer);
      }
    } catch (exc) {
      if (token !== testToken) return;
      tester.dataset.state = "error";
      clear(tester, h("pre", {class: "error tester-error"}, exc.message));
    }
  }, 300);
  const metrics = rows(
    "metric",
    [
      ["Name", "name (e.g. loss)"],
      ["Regex", "regex with one group, e.g. loss=(\\S+)", "wide"],
    ],
    test,
  );
  sample.addEventListener("input", test);

  function showTest(answer) {
    tester.dataset.state = (answer.Problems || []).length ? "problems" : "ok";
    const points = answer.Points || [];
    const warnings = answer.Warnings || [];
    const given = numberRows();
    for (const problem of answer.Problems || []) {
      const row = given[problem.Definition - 1];
      if (row) {
        row.classList.add("invalid");
        row.title = problem.Message;
      }
    }
    clear(
      tester,
      warningList(warnings),
      h(
        "table",
        {class: "tester-definitions"},
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            ["#", "Definition", "Matches", "Values", "Rejected", "Near misses"].map((x) => h("th", {}, x)),
          ),
        ),
        h(
          "tbody",
          {},
          (answer.Definitions || []).map((d, i) => {
            if (d.Problems)
              return h(
                "tr",
                {class: "tester-def tester-problem", "data-name": d.Name, "data-position": i + 1},
                h("td", {class: "num"}, i + 1),
                h("td", {}, d.Name),
                h("td", {colspan: 4, class: "error"}, d.Problems.map((m) => h("div", {}, m))),
              );
            // by position, not name: definitions may share a name (each feeds the one metric)
            const values = points.filter((p) => p.Definition === i + 1).map((p) => fmtNum(p.Value));
            const rejected = Object.entries(d.Rejected || {});
            return h(
              "tr",
              {class: "tester-def", "data-name": d.Name, "data-position": i + 1},
              h("td", {class: "num"}, i + 1),
              h("td", {}, d.Name),
              h(
                "td",
                {class: "num", "data-matches": d.Matches},
                fmtNum(d.Matches),
                d.NonFinite ? ` (${d.NonFinite} non-finite)` : "",
              ),
              h(
                "td",
                {class: "values"},
                values.length ? values.slice(0, 20).join(", ") + (values.length > 20 ? ", …" : "") : "–",
              ),
              h(
                "td",
                {},
                rejected.length ? rejected.map(([why, n]) => h("div", {}, `${n} × ${why}`)) : "–",
                (d.RejectedExamples || []).slice(0, 3).map((x) => h("div", {}, h("code", {class: "example"}, x))),
              ),
              h(
                "td",
                {class: "near-misses"},
                d.NearMiss ? h("div", {class: "hint"}, d.NearMiss) : null,
                (d.UnmatchedExamples || []).length
                  ? d.UnmatchedExamples.slice(0, 3).map((x) => h("div", {}, h("code", {class: "example"}, x)))
                  : d.NearMiss
                    ? null
                    : "–",
              ),
            );
          }),
        ),
      ),
      points.length
        ? h(
            "details",
            {class: "tester-points"},
            h("summary", {}, `${points.length} points extracted`),
            h(
              "ol",
              {},
              points.slice(0, 200).map((p) => h("li", {}, `line ${p.Line}: ${p.MetricName} = ${fmtNum(p.Value)}`)),
            ),
          )
        : h("p", {class: "muted"}, "No points extracted from the sample."),
    );
  }

  function requestBody() {
    const algorithm = {TrainingInputMode: "File"};
    if (kind.value === "command") algorithm.ContainerEntrypoint = splitCommand(command.value);
    else {
      algorithm.TrainingImage = command.value.trim();
      if (!algorithm.TrainingImage) throw new Error("Give the image to run.");
      const given = splitCommand(arguments_.value);
      if (given.length) algorithm.ContainerArguments = given;
    }
    if (kind.value === "command" && !algorithm.ContainerEntrypoint.length) throw new Error("Give the command to run.");
    const where = directory.value.trim();
    const definitions = definitionsNow();
    if (definitions.length) algorithm.MetricDefinitions = definitions;
    const body = {TrainingJobName: name.value.trim(), AlgorithmSpecification: algorithm};
    if (kind.value === "command" && where) body.TrainmonConfig = {WorkingDirectory: where};
    const hps = hyper.values().filter((r) => r.key);
    if (hps.length) body.HyperParameters = Object.fromEntries(hps.map((r) => [r.key, r.value]));
    body.ResourceConfig = {InstanceCount: Number(count.value) || 1};
    if (runtime.value) body.StoppingCondition = {MaxRuntimeInSeconds: Number(runtime.value)};
    const chans = channels.values().filter((r) => r.channel || r.path);
    if (chans.length) {
      body.InputDataConfig = chans.map((r) => ({
        ChannelName: r.channel,
        DataSource: {
          S3DataSource: {
            S3DataType: "S3Prefix",
            S3Uri: r.path,
            S3DataDistributionType: "FullyReplicated",
          },
        },
      }));
    }
    return body;
  }

  const form = h(
    "form",
    {
      class: "create",
      novalidate: true,
      onsubmit: async (e) => {
        e.preventDefault();
        error.hidden = true;
        let body;
        try {
          body = requestBody();
        } catch (exc) {
          error.hidden = false;
          error.textContent = exc.message;
          return;
        }
        const defined = JSON.stringify(body.AlgorithmSpecification.MetricDefinitions || []);
        const empty =
          lastTest && lastTest.definitions === defined
            ? lastTest.answer.Definitions.filter((d) => !d.Problems && d.Matches === 0).map((d) => d.Name)
            : [];
        if (empty.length && warnedEmpty !== defined) {
          warnedEmpty = defined; // said once: a second click creates the job
          error.hidden = false;
          error.classList.add("warning");
          error.textContent =
            `${empty.join(", ")} matched nothing in the sample: ` +
            "check the regex, or click Create job again to create it as it is.";
          return;
        }
        error.classList.remove("warning");
        submit.disabled = true;
        try {
          await post("/api/jobs", body);
          navigate(`/jobs/${encodeURIComponent(body.TrainingJobName)}`);
        } catch (exc) {
          error.hidden = false;
          error.textContent = exc instanceof ApiError ? `${exc.code}: ${exc.message}` : exc.message;
          submit.disabled = false;
        }
      },
    },
    h(
      "section",
      {class: "panel"},
      h("h2", {}, "Job"),
      field("Name", name, "letters, digits and hyphens"),
      h(
        "div",
        {class: "field"},
        h("span", {class: "label"}, "Run"),
        h("div", {class: "inline"}, kind, command, images),
        runHelp,
      ),
      argumentsField,
      directoryField,
      h("div", {class: "inline-fields"}, field("Instances", count), field("Max runtime (s)", runtime)),
    ),
    h("section", {class: "panel"}, h("h2", {}, "Hyperparameters"), hyper.el),
    h(
      "section",
      {class: "panel"},
      h("h2", {}, "Input channels"),
      h(
        "p",
        {class: "help"},
        "each channel is a local directory or file; the job finds it at input/data/NAME in its directory, " +
          "named by SM_CHANNEL_NAME",
      ),
      channels.el,
    ),
    h(
      "section",
      {class: "panel"},
      h("h2", {}, "Metrics"),
      h(
        "p",
        {class: "help"},
        "each definition's regex is searched for in every log record; its first group is the value",
      ),
      metrics.el,
      field("Sample output", sample),
      h("h3", {}, "What the definitions extract"),
      tester,
    ),
    error,
    h("div", {class: "actions"}, submit, h("a", {class: "button", href: "/"}, "Cancel")),
  );
  metrics.add();
  clear(root, h("div", {class: "page-head"}, h("h1", {}, "New training job")), form);
  test();
  name.focus();
  return () => test.cancel();
}
