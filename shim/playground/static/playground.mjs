// The playground page: the form's state, its rendering and the calls to the service. What can be checked without a
// page (the request, its checks, the code, how an answer or an error reads) is in request.mjs.
import * as core from "./request.mjs";

const STORAGE_KEY = "intern-decision-playground-token";
const $ = (id) => document.getElementById(id);
const page = {token: "", models: null, modelsToken: null, questions: [], nextNumber: 1, tab: "curl"};

function element(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (key === "text") node.textContent = value;
    else if (key === "className") node.className = value;
    else node.setAttribute(key, value);
  }
  node.append(...children);
  return node;
}

// --- token and models ------------------------------------------------------------------------------------------

function authorization() {
  return {Authorization: `Bearer ${page.token}`};
}

function keepToken() {
  if ($("remember").checked && page.token) sessionStorage.setItem(STORAGE_KEY, page.token);
  else sessionStorage.removeItem(STORAGE_KEY);
}

async function readJson(response) {
  try {
    return await response.json();
  } catch {
    return null;
  }
}

// Loads GET /v1/models for the token in the field; returns an error report, or null once the models are known.
async function loadModels() {
  if (!page.token) return core.errorReport(401, {error: {code: "unauthorized", message: "Enter the API token first."}});
  if (page.models && page.modelsToken === page.token) return null;
  $("models-status").textContent = "Reading the models …";
  let response;
  try {
    response = await fetch("/v1/models", {headers: authorization(), cache: "no-store"});
  } catch (err) {
    $("models-status").textContent = "";
    return {status: 0, code: "network_error", message: String(err.message || err), retryAfter: null, fields: []};
  }
  const body = await readJson(response);
  if (!response.ok) {
    const report = core.errorReport(response.status, body, response.headers.get("Retry-After"));
    $("models-status").textContent = `The models could not be read: ${report.code}: ${report.message}`;
    return report;
  }
  page.models = body;
  page.modelsToken = page.token;
  const select = $("model");
  const previous = select.value;
  select.replaceChildren(...body.models.map((entry) => element("option", {value: entry.name, text: entry.name})));
  if (body.models.some((entry) => entry.name === previous)) select.value = previous;
  $("models-status").textContent = `${body.models.length} model names.`;
  refresh();
  return null;
}

function limits() {
  return page.models ? core.limitsOf(core.modelEntry(page.models, $("model").value)) : null;
}

// --- state ------------------------------------------------------------------------------------------------------

function stateMode() {
  return document.querySelector("input[name=state-mode]:checked").value;
}

function readState() {
  return core.parseState(stateMode(), $("state").value);
}

// --- questions --------------------------------------------------------------------------------------------------

function addQuestion(type) {
  page.questions.push(core.newQuestion(type, `${type}_${page.nextNumber++}`));
  renderQuestions();
  $(`q${page.questions.length - 1}-name`).focus();
}

function textInput(id, label, value, onInput, attributes = {}) {
  const input = element("input", {id, type: "text", spellcheck: "false", ...attributes});
  input.value = value;
  input.addEventListener("input", () => {
    onInput(input.value);
    refresh();
  });
  return element("div", {className: "field"}, element("label", {for: id, text: label}), input);
}

function entryRows(question, index) {
  const isChoice = question.type === "choice";
  const what = isChoice ? "option" : "level";
  const list = isChoice ? question.options : question.levels;
  const max = limits() ? limits().max_options_per_question : Infinity;
  const box = element("fieldset", {className: "entries"}, element("legend", {text: isChoice ? "Options" : "Levels, lowest first"}));
  list.forEach((entry, j) => {
    const id = `q${index}-${what}${j}`;
    const row = element("div", {className: "entry"});
    if (isChoice) {
      row.append(textInput(`${id}-value`, `Option ${j + 1}`, entry.value, (v) => { entry.value = v; }),
        textInput(`${id}-description`, `Option ${j + 1} description (optional)`, entry.description,
          (v) => { entry.description = v; }));
    } else {
      row.append(textInput(id, `Level ${j} text`, entry, (v) => { question.levels[j] = v; }));
    }
    const remove = element("button", {type: "button", className: "small", text: "Remove",
      "aria-label": `Remove ${what} ${j + 1} of question ${index + 1}`});
    remove.addEventListener("click", () => {
      list.splice(j, 1);
      renderQuestions();
      $(`q${index}-add-${what}`).focus();
    });
    row.append(remove);
    box.append(row);
  });
  const add = element("button", {type: "button", id: `q${index}-add-${what}`, className: "small", text: `Add ${what === "option" ? "an option" : "a level"}`});
  if (list.length >= max) add.disabled = true;
  add.addEventListener("click", () => {
    list.push(isChoice ? {value: "", description: ""} : "");
    renderQuestions();
    const focus = isChoice ? `q${index}-option${list.length - 1}-value` : `q${index}-level${list.length - 1}`;
    $(focus).focus();
  });
  box.append(add);
  return box;
}

function questionBox(question, index) {
  const box = element("fieldset", {className: "question", "data-type": question.type},
    element("legend", {text: `Question ${index + 1}: ${question.type}`}));
  box.append(textInput(`q${index}-name`, "Name", question.name, (v) => { question.name = v; }),
    textInput(`q${index}-instructions`, "Instructions (optional)", question.instructions,
      (v) => { question.instructions = v; }));
  if (question.type === "noul") {
    box.append(textInput(`q${index}-true`, "What yes means (optional)", question.whenTrue, (v) => { question.whenTrue = v; }),
      textInput(`q${index}-false`, "What no means (optional)", question.whenFalse, (v) => { question.whenFalse = v; }));
  } else {
    box.append(entryRows(question, index));
  }
  const remove = element("button", {type: "button", className: "small danger", text: `Remove question ${index + 1}`});
  remove.addEventListener("click", () => {
    page.questions.splice(index, 1);
    renderQuestions();
    $("add-choice").focus();
  });
  box.append(remove);
  return box;
}

function renderQuestions() {
  $("questions").replaceChildren(...page.questions.map(questionBox));
  refresh();
}

// --- checks and code, after every change ----------------------------------------------------------------------------

function currentRequest() {
  const state = readState();
  const problems = core.questionProblems(page.questions, limits());
  const model = $("model").value;
  return {state, problems, body: state.ok && problems.length === 0 && model
    ? core.buildRequest(model, state.value, page.questions) : null};
}

function refresh() {
  const {state, problems, body} = currentRequest();
  const stateCheck = $("state-check");
  stateCheck.textContent = state.ok ? "" : state.error;
  $("state").setAttribute("aria-invalid", String(!state.ok));
  $("problems").replaceChildren(...problems.map((problem) => element("li", {
    text: problem.question === null ? problem.message : `Question ${problem.question + 1}: ${problem.message}`})));
  const max = limits();
  $("limits").textContent = max ? `Limits of this model: ${max.max_questions_per_request} questions a request ` +
    `(${max.max_questions_per_call} a call), ${max.max_options_per_question} options or levels a question, ` +
    `${max.max_tokens_per_call} tokens a call.` : "";
  for (const type of core.QUESTION_TYPES) {
    $(`add-${type}`).disabled = Boolean(max) && page.questions.length >= max.max_questions_per_request;
  }
  const base = window.location.origin;
  const code = {curl: body && core.asCurl(base, body), python: body && core.asPython(base, body),
                mcp: body && core.asMcp(base, body)};
  const waiting = page.models ? "Complete the state and the questions to see the request."
    : "Enter the token to read the models; the request shows here.";
  for (const [name, text] of Object.entries(code)) {
    $(`code-${name}`).querySelector("code").textContent = text || waiting;
  }
}

// --- the answer ---------------------------------------------------------------------------------------------------

// The outcome in view once it is shown (below the form on a narrow window).
function revealOutcome() {
  const box = $("outcome").getBoundingClientRect();
  if (box.top < 0 || box.top > window.innerHeight) $("outcome").scrollIntoView({block: "start"});
}

function showError(report, requestId) {
  const box = $("error");
  box.replaceChildren(
    element("p", {className: "error-code", text: `${report.status ? `HTTP ${report.status} ` : ""}${report.code}`}),
    element("p", {className: "error-message", text: report.message}));
  if (report.retryAfter) {
    box.append(element("p", {className: "retry-after", text: `Retry after ${report.retryAfter} s (Retry-After).`}));
  }
  if (report.fields.length) box.append(element("ul", {}, ...report.fields.map((field) => element("li", {text: field}))));
  if (requestId) box.append(element("p", {className: "help", text: `Request id ${requestId}`}));
  box.hidden = false;
  revealOutcome();
}

function formatNumber(value) {
  return `${value.toFixed(4)} (${(value * 100).toFixed(1)}%)`;
}

function answerView(name, answer) {
  const bars = core.answerBars(answer);
  const list = element("ul", {className: "bars", "aria-label": `Probabilities of ${name}`});
  for (const bar of bars) {
    const fill = element("span", {className: "fill"});
    fill.style.width = `${Math.max(0, Math.min(1, bar.value)) * 100}%`;
    const label = element("span", {className: "bar-label", text: bar.label});
    if (bar.chosen) label.append(element("strong", {className: "mark", text: " ✔ chosen"}));
    list.append(element("li", {className: bar.chosen ? "bar-row chosen" : "bar-row", "data-key": bar.key,
      "data-value": String(bar.value)}, label, element("span", {className: "bar", "aria-hidden": "true"}, fill),
      element("span", {className: "bar-value", text: formatNumber(bar.value)})));
  }
  const chosen = bars.find((bar) => bar.chosen);
  const summary = answer.type === "noul" ? `P(yes) ${answer.noul}${chosen ? ` · answer: ${chosen.label}` : ""}`
    : answer.type === "score" ? `Expected level ${answer.score} · most likely ${chosen ? chosen.label : "?"} · ` +
      `confidence ${answer.confidence}`
    : `Chosen: ${answer.choice} · confidence ${answer.confidence}`;
  return element("article", {className: "answer", "data-name": name, "data-type": answer.type,
    "data-confidence": answer.confidence === undefined ? "" : String(answer.confidence)},
  element("h3", {text: `${name} (${answer.type})`}), element("p", {className: "summary", text: summary}), list);
}

function showAnswer(body, elapsedMs, requestId) {
  $("answers").replaceChildren(...Object.entries(body.answers).map(([name, answer]) => answerView(name, answer)));
  const facts = [["Model", body.model], ["Request id", requestId || ""], ["Input tokens", body.usage.input_tokens],
    ["Output tokens", body.usage.output_tokens], ["Time", `${Math.round(elapsedMs)} ms (measured by this page)`]];
  const run = $("run");
  run.replaceChildren(...facts.flatMap(([term, value]) => [element("dt", {text: term}),
    element("dd", {"data-fact": term.toLowerCase().replaceAll(" ", "-"), text: String(value)})]));
  run.hidden = false;
  const rows = (body.x_calls || []).map((call) => element("tr", {},
    element("td", {text: String(call.index)}), element("td", {text: call.questions.join(", ")}),
    element("td", {text: String(call.input_tokens)}),
    element("td", {text: call.inference_ms === undefined ? "" : String(call.inference_ms)})));
  const table = element("table", {id: "calls-table"},
    element("caption", {text: "Calls: how the questions were chunked (x_calls)"}),
    element("thead", {}, element("tr", {}, ...["Call", "Questions", "Input tokens", "Inference ms"].map(
      (heading) => element("th", {scope: "col", text: heading})))),
    element("tbody", {}, ...rows));
  $("calls").replaceChildren(table);
  revealOutcome();
}

async function submit(event) {
  event.preventDefault();
  const button = $("submit");
  $("error").hidden = true;
  const modelsError = await loadModels();
  if (modelsError) {
    showError(modelsError);
    return;
  }
  const {body, problems, state} = currentRequest();
  if (!body) {
    showError({status: 0, code: "not_sent", message: state.ok ? problems[0].message : state.error,
      retryAfter: null, fields: problems.map((p) => p.message)});
    return;
  }
  button.disabled = true;
  button.textContent = "Asking …";
  $("answers").replaceChildren();
  $("calls").replaceChildren();
  $("run").hidden = true;
  const started = performance.now();
  try {
    const response = await fetch("/v1/systemone", {method: "POST", cache: "no-store",
      headers: {...authorization(), "Content-Type": "application/json"}, body: JSON.stringify(body)});
    const json = await readJson(response);
    const requestId = response.headers.get("X-Request-Id");
    if (response.ok && json) showAnswer(json, performance.now() - started, requestId);
    else showError(core.errorReport(response.status, json, response.headers.get("Retry-After")), requestId);
  } catch (err) {
    showError({status: 0, code: "network_error", message: String(err.message || err), retryAfter: null, fields: []});
  } finally {
    button.disabled = false;
    button.textContent = "Ask the model";
  }
}

// --- pins, code tabs, copy -------------------------------------------------------------------------------------------

async function showPins() {
  try {
    const response = await fetch("/health", {cache: "no-store"});
    const body = await readJson(response);
    if (!response.ok || !body || !body.model) {
      $("pins").textContent = `The model is not ready: ${(body && body.error && body.error.message) || response.status}`;
      return;
    }
    const model = body.model;
    $("pins").replaceChildren(
      element("span", {"data-pin": "revision", text: `revision ${model.revision}`}), " · ",
      element("span", {"data-pin": "inference_sha256", text: `inference.py sha256 ${model.inference_sha256}`}), " · ",
      element("span", {"data-pin": "linear_attention", text: `linear attention: ${model.linear_attention}`}));
  } catch (err) {
    $("pins").textContent = `/health did not answer: ${err.message || err}`;
  }
}

function selectTab(name, focus) {
  page.tab = name;
  for (const tab of ["curl", "python", "mcp"]) {
    const selected = tab === name;
    $(`tab-${tab}`).setAttribute("aria-selected", String(selected));
    $(`tab-${tab}`).tabIndex = selected ? 0 : -1;
    $(`code-${tab}`).hidden = !selected;
  }
  if (focus) $(`tab-${name}`).focus();
}

async function copyCode() {
  const block = $(`code-${page.tab}`);
  const text = block.textContent;
  try {
    await navigator.clipboard.writeText(text);
    $("copied").textContent = "Copied.";
  } catch {
    const range = document.createRange();
    range.selectNodeContents(block);
    window.getSelection().removeAllRanges();
    window.getSelection().addRange(range);
    $("copied").textContent = "Selected: press Ctrl+C to copy.";
  }
}

function start() {
  const kept = sessionStorage.getItem(STORAGE_KEY);
  if (kept) {
    page.token = kept;
    $("token").value = kept;
    $("remember").checked = true;
  }
  $("token").addEventListener("input", () => {
    page.token = $("token").value.trim();
    keepToken();
  });
  $("token").addEventListener("change", () => { loadModels(); });
  $("remember").addEventListener("change", keepToken);
  $("model").addEventListener("change", renderQuestions);
  $("state").addEventListener("input", refresh);
  for (const radio of document.querySelectorAll("input[name=state-mode]")) radio.addEventListener("change", refresh);
  for (const type of core.QUESTION_TYPES) $(`add-${type}`).addEventListener("click", () => addQuestion(type));
  $("ask").addEventListener("submit", submit);
  const tabs = ["curl", "python", "mcp"];
  tabs.forEach((name, index) => {
    const tab = $(`tab-${name}`);
    tab.addEventListener("click", () => selectTab(name, false));
    tab.addEventListener("keydown", (event) => {
      const step = {ArrowRight: 1, ArrowLeft: -1}[event.key];
      if (step) {
        event.preventDefault();
        selectTab(tabs[(index + step + tabs.length) % tabs.length], true);
      }
    });
  });
  $("copy").addEventListener("click", copyCode);
  showPins();
  if (page.token) loadModels();
  refresh();
}

start();
