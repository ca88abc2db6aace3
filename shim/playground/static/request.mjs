// The playground's logic without the page: the state read as typed, the questions checked against the limits the
// service publishes in GET /v1/models, the System One request built from them, the same request as code (curl, the
// official Python SDK, an MCP tools/call), and an answer or an error read for display. No DOM here, so that it runs
// as it is in the browser and under node (the unit tests).

export const TOKEN_VARIABLE = "API_TOKEN"; // the code samples read the token from this environment variable
export const QUESTION_TYPES = ["choice", "score", "noul"];

// --- the state -----------------------------------------------------------------------------------------------

function finite(value) {
  if (typeof value === "number") return Number.isFinite(value);
  if (Array.isArray(value)) return value.every(finite);
  if (value !== null && typeof value === "object") return Object.values(value).every(finite);
  return true;
}

// {ok: true, value} or {ok: false, error}: text is sent as a string (a blank one is taken for a slip); JSON must be
// an object, array or string, empty too, of finite numbers (the service's rule).
export function parseState(mode, text) {
  if (mode === "text") {
    return text.trim() === "" ? {ok: false, error: "Write the state: the situation the questions are about."}
      : {ok: true, value: text};
  }
  let value;
  try {
    value = JSON.parse(text);
  } catch (err) {
    return {ok: false, error: `Not valid JSON: ${err.message}`};
  }
  if (value === null || !["object", "string"].includes(typeof value)) {
    return {ok: false, error: "The state must be a JSON object, array or string."};
  }
  if (!finite(value)) return {ok: false, error: "Every number in the state must be finite."};
  return {ok: true, value};
}

// --- the service's limits ------------------------------------------------------------------------------------

// The entry of GET /v1/models that `name` names, or the first (the canonical name) when `name` is not listed.
export function modelEntry(models, name) {
  const entries = (models && models.models) || [];
  return entries.find((entry) => entry.name === name) || entries[0] || null;
}

// The limits the page checks against, as the service publishes them; null when it publishes none.
export function limitsOf(entry) {
  const limits = entry && entry.limits;
  if (!limits) return null;
  const wanted = ["max_questions_per_request", "max_options_per_question", "max_questions_per_call"];
  return wanted.every((key) => Number.isInteger(limits[key])) ? limits : null;
}

// --- the questions -------------------------------------------------------------------------------------------

export function newQuestion(type, name) {
  if (!QUESTION_TYPES.includes(type)) throw new Error(`unknown question type ${type}`);
  return {type, name, instructions: "", options: type === "choice" ? [{value: "", description: ""}] : [],
          levels: type === "score" ? [""] : [], whenTrue: "", whenFalse: ""};
}

// The problems that keep the request from being sent, each {question (index or null), field, message}; [] when
// none. The counts are the service's limits; the page cannot check the token limit, which the model checks.
export function questionProblems(questions, limits) {
  const problems = [];
  const add = (question, field, message) => problems.push({question, field, message});
  if (questions.length === 0) add(null, "questions", "Add at least one question.");
  if (limits && questions.length > limits.max_questions_per_request) {
    add(null, "questions", `At most ${limits.max_questions_per_request} questions in one request.`);
  }
  const seen = new Set();
  questions.forEach((question, index) => {
    if (question.name.trim() === "") add(index, "name", "Give the question a name.");
    else if (seen.has(question.name)) add(index, "name", `The name ${question.name} is used twice.`);
    seen.add(question.name);
    const entries = question.type === "choice" ? question.options.map((option) => option.value)
      : question.type === "score" ? question.levels : null;
    if (entries === null) return;
    const what = question.type === "choice" ? "option" : "level";
    if (entries.length === 0) add(index, `${what}s`, `Add at least one ${what}.`);
    if (limits && entries.length > limits.max_options_per_question) {
      add(index, `${what}s`, `At most ${limits.max_options_per_question} ${what}s.`);
    }
    if (entries.some((entry) => entry.trim() === "")) add(index, `${what}s`, `Every ${what} needs text.`);
    if (question.type === "choice" && new Set(entries).size !== entries.length) {
      add(index, "options", "Two options have the same value.");
    }
  });
  return problems;
}

function withInstructions(question, body) {
  return question.instructions.trim() === "" ? body : {type: body.type, instructions: question.instructions,
    ...Object.fromEntries(Object.entries(body).filter(([key]) => key !== "type"))};
}

function questionBody(question) {
  if (question.type === "choice") {
    const criteria = {};
    for (const option of question.options) criteria[option.value] = option.description === "" ? null : option.description;
    return withInstructions(question, {type: "choice", criteria});
  }
  if (question.type === "score") return withInstructions(question, {type: "score", criteria: [...question.levels]});
  const criteria = {};
  if (question.whenTrue !== "") criteria.true = question.whenTrue;
  if (question.whenFalse !== "") criteria.false = question.whenFalse;
  return withInstructions(question, Object.keys(criteria).length ? {type: "noul", criteria} : {type: "noul"});
}

// The body of POST /v1/systemone, the questions in the order they were added.
export function buildRequest(model, state, questions) {
  const body = {model, state, questions: {}};
  for (const question of questions) body.questions[question.name] = questionBody(question);
  return body;
}

// --- the same request as code --------------------------------------------------------------------------------

export function shellQuote(text) {
  return `'${text.replaceAll("'", "'\\''")}'`;
}

function curlOf(url, extraHeaders, payload) {
  return [`curl -sS ${shellQuote(url)}`, `-H "Authorization: Bearer $${TOKEN_VARIABLE}"`,
    "-H 'Content-Type: application/json'", ...extraHeaders,
    `--data-binary ${shellQuote(JSON.stringify(payload, null, 2))}`].join(" \\\n  ");
}

// curl, the token read from $API_TOKEN: run as it is once API_TOKEN is set.
export function asCurl(baseUrl, body) {
  return curlOf(`${baseUrl}/v1/systemone`, [], body);
}

// The MCP tools/call of the system_one tool (POST /mcp, stateless Streamable HTTP answering in JSON), as curl.
export function asMcp(baseUrl, body) {
  const message = {jsonrpc: "2.0", id: 1, method: "tools/call", params: {name: "system_one", arguments: body}};
  return curlOf(`${baseUrl}/mcp`, ["-H 'Accept: application/json, text/event-stream'"], message);
}

// A JSON value as a Python literal (JSON's string escapes are Python's too).
export function pythonLiteral(value, indent = "") {
  const inner = `${indent}    `;
  if (value === null) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value === "number" || typeof value === "string") return JSON.stringify(value);
  if (Array.isArray(value)) {
    if (value.length === 0) return "[]";
    return `[\n${value.map((item) => inner + pythonLiteral(item, inner)).join(",\n")},\n${indent}]`;
  }
  const entries = Object.entries(value);
  if (entries.length === 0) return "{}";
  return `{\n${entries.map(([key, item]) => `${inner}${JSON.stringify(key)}: ${pythonLiteral(item, inner)}`)
    .join(",\n")},\n${indent}}`;
}

const SDK_CLASSES = {choice: "Choice", score: "Score", noul: "Noul"};

// The official SDK (typesafe-sdk): the same request through TypeSafeClient.system_one.
export function asPython(baseUrl, body) {
  const types = QUESTION_TYPES.filter((type) => Object.values(body.questions).some((q) => q.type === type));
  const imports = [...types.map((type) => SDK_CLASSES[type]), "TypeSafeClient"].sort().join(", ");
  const questions = Object.entries(body.questions).map(([name, question]) => {
    const args = Object.entries(question).filter(([key]) => key !== "type")
      .map(([key, value]) => `${key}=${pythonLiteral(value, "        ")}`);
    return `        ${JSON.stringify(name)}: ${SDK_CLASSES[question.type]}(${args.join(", ")}),`;
  });
  return [
    "import json",
    "import os",
    "",
    `from typesafe_sdk import ${imports}`,
    "",
    `client = TypeSafeClient(api_key=os.environ[${JSON.stringify(TOKEN_VARIABLE)}], base_url=${JSON.stringify(baseUrl)},`,
    `                        model=${JSON.stringify(body.model)})`,
    "result = client.system_one(",
    `    ${pythonLiteral(body.state, "    ")},`,
    "    {",
    ...questions,
    "    },",
    ")",
    "print(json.dumps(result.raw_http_response.json()))",
    "",
  ].join("\n");
}

// --- an answer and an error, read for display ----------------------------------------------------------------

// The option the model picked: predict()'s own decision (x_native.decision: its argmax under the checkpoint's
// tie-break) where the answer carries it, else the highest probability.
function decisionOf(answer) {
  const native = answer.x_native;
  if (native && typeof native.decision === "string") return native.decision;
  if (answer.type === "noul") return answer.noul > 0.5 ? "yes" : "no";
  if (answer.type === "choice") return answer.choice;
  const entries = Object.entries(answer.probabilities);
  return entries.reduce((best, entry) => (entry[1] > best[1] ? entry : best), entries[0])[0];
}

// One bar per option, level or side: {key, label, value, chosen}, value exactly the answer's number. A noul's bars
// are P(yes) (the answer's noul) and, where predict()'s answer carries it, P(no).
export function answerBars(answer) {
  const decision = decisionOf(answer);
  if (answer.type === "noul") {
    const bars = [{key: "true", label: "yes", value: answer.noul, chosen: decision === "yes"}];
    const no = answer.x_native && answer.x_native.probabilities && answer.x_native.probabilities.no;
    if (typeof no === "number") bars.push({key: "false", label: "no", value: no, chosen: decision === "no"});
    return bars;
  }
  return Object.entries(answer.probabilities).map(([key, value]) => {
    if (answer.type === "score") {
      const level = answer.legend && answer.legend[key];
      const label = typeof level === "string" ? `${key}: ${level}` : `${key}: ${JSON.stringify(level)}`;
      return {key, label, value, chosen: decision === key};
    }
    return {key, label: key, value, chosen: decision === key};
  });
}

// What the page shows of a refusal: the envelope's code and message, the 422's fields, the wait of a 429 or 503.
export function errorReport(status, body, retryAfter) {
  const envelope = body && typeof body === "object" && body.error && typeof body.error === "object" ? body.error : {};
  const report = {status, code: typeof envelope.code === "string" ? envelope.code : `http_${status}`,
                  message: typeof envelope.message === "string" ? envelope.message : "The answer was not the service's JSON envelope.",
                  retryAfter: null, fields: []};
  if ((status === 429 || status === 503) && retryAfter) report.retryAfter = retryAfter;
  if (body && Array.isArray(body.detail)) {
    report.fields = body.detail.map((item) => `${(item.loc || []).join(".")}: ${item.msg}`);
  }
  return report;
}
