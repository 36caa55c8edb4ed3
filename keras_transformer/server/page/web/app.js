// The page's behaviour: the models from GET /v1/models (their language names from LibreTranslate's
// GET /languages), the n-best list from the `translate_options` signature, and the attention of
// the chosen translation from the `attention` signature, drawn as heat maps (the paper's
// Figures 3-5). Every failure is shown as text in the alert region.
"use strict";

// §6.1's search: beam 4, length penalty α = 0.6, output up to the input's length + 50.
const SEARCH = { beam_size: 4, alpha: 0.6, extra_length: 50 };

const page = {
  error: document.getElementById("error"),
  form: document.getElementById("translate-form"),
  model: document.getElementById("model"),
  modelDetails: document.getElementById("model-details"),
  source: document.getElementById("source"),
  status: document.getElementById("status"),
  result: document.getElementById("result"),
  translation: document.getElementById("translation"),
  nBest: document.getElementById("n-best"),
  attention: document.getElementById("attention"),
  attentionOf: document.getElementById("attention-of"),
};

// The two heat maps: which output of the `attention` signature, and which pieces are its rows.
const MAPS = [
  { output: "encoder_decoder_attention", rows: "target", prefix: "cross" },
  { output: "encoder_self_attention", rows: "source", prefix: "self" },
];

// What is shown: the attention of the chosen translation, redrawn when a select or the width
// changes. `request` counts translations, so that a late reply to an older one is dropped.
const shown = { attention: null, request: 0 };

class ServerError extends Error {}

// The JSON reply of GET `path`, or of POST `body` to it; a ServerError that says why not.
async function call(path, body) {
  const options =
    body === undefined
      ? {}
      : { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  let response;
  try {
    response = await fetch(path, options);
  } catch (error) {
    throw new ServerError(`The server cannot be reached (${error.message}).`);
  }
  const text = await response.text();
  let reply = null;
  try {
    reply = JSON.parse(text);
  } catch {
    // Not JSON: the status and the start of the text say what happened.
  }
  if (!response.ok) {
    const why = reply && typeof reply.error === "string" ? reply.error : text.slice(0, 300);
    throw new ServerError(`${path} answered ${response.status} ${response.statusText}: ${why}`);
  }
  if (reply === null) {
    throw new ServerError(`${path} answered something that is not JSON: ${text.slice(0, 300)}`);
  }
  return reply;
}

function showError(error) {
  page.error.textContent = error instanceof ServerError ? error.message : `Error: ${error}`;
}

function clearError() {
  page.error.textContent = "";
}

// -- the models ----------------------------------------------------------------------------

function megabytes(bytes) {
  return `${(bytes / 1e6).toFixed(1)} MB`;
}

// A model's newest AVAILABLE version (the one a request without a version gets), or undefined.
function servedVersion(model) {
  const available = model.versions.filter((version) => version.state === "AVAILABLE");
  available.sort((a, b) => Number(b.version) - Number(a.version));
  return available[0];
}

function languagePair(source, target, names) {
  if (!source || !target) {
    return null;
  }
  return {
    codes: `${source}→${target}`,
    names: `${names.get(source) || source} → ${names.get(target) || target}`,
  };
}

async function loadModels() {
  // /languages is LibreTranslate's API: a server without it still serves the page.
  const [models, languages] = await Promise.all([
    call("/v1/models"),
    call("/languages").catch(() => []),
  ]);
  const names = new Map(languages.map((language) => [language.code, language.name]));
  page.model.replaceChildren();
  for (const model of models.models) {
    const version = servedVersion(model);
    if (version === undefined) {
      continue;
    }
    // A multilingual model translates into each of its targets, a sentence led by its token.
    const tokens = Object.entries(version.target_language_tokens || {});
    const targets = tokens.length ? tokens : [[version.target_language, ""]];
    for (const [target, token] of targets) {
      const pair = languagePair(version.source_language, target, names);
      const option = new Option(pair ? `${model.name} (${pair.codes})` : model.name, model.name);
      const details = [pair ? pair.names : "languages not recorded in the export"];
      details.push(`version ${version.version}`, `${megabytes(version.weight_bytes)} of weights`);
      option.dataset.details = details.join(" · ");
      option.dataset.token = token;
      page.model.append(option);
    }
  }
  if (page.model.options.length === 0) {
    throw new ServerError("The server has no model available yet: reload the page later.");
  }
  describeModel();
}

function describeModel() {
  const option = page.model.selectedOptions[0];
  page.modelDetails.textContent = option ? option.dataset.details : "";
}

function predictPath() {
  return `/v1/models/${encodeURIComponent(page.model.value)}:predict`;
}

// -- translating ---------------------------------------------------------------------------

// The model's input for `text`: led by the target's token for a multilingual model.
function modelInput(text) {
  const token = page.model.selectedOptions[0].dataset.token;
  return token ? `${token} ${text}` : text;
}

async function translate() {
  clearError();
  const text = modelInput(page.source.value);
  if (page.source.value.trim() === "") {
    showError(new ServerError("Type a sentence to translate."));
    return;
  }
  const request = ++shown.request;
  page.status.textContent = "Translating…";
  try {
    const reply = await call(predictPath(), {
      signature_name: "translate_options",
      inputs: { text: [text], ...SEARCH },
    });
    if (request !== shown.request) {
      return;
    }
    showTranslations(text, reply.outputs);
    page.status.textContent = "";
  } catch (error) {
    if (request === shown.request) {
      page.status.textContent = "";
      showError(error);
    }
  }
}

function showTranslations(text, outputs) {
  page.translation.value = outputs.translations[0];
  const hypotheses = outputs.n_best_translations[0]
    .map((translation, i) => ({ translation, score: outputs.n_best_scores[0][i] }))
    .filter((hypothesis) => hypothesis.translation !== ""); // slots the search left empty
  page.nBest.replaceChildren(
    ...hypotheses.map((hypothesis) => {
      const button = document.createElement("button");
      button.type = "button";
      button.setAttribute("aria-pressed", "false");
      const words = document.createElement("span");
      words.className = "hypothesis";
      words.textContent = hypothesis.translation;
      const score = document.createElement("span");
      score.className = "score";
      score.textContent = hypothesis.score.toFixed(3);
      score.dataset.score = String(hypothesis.score);
      button.append(words, score);
      button.addEventListener("click", () => choose(button, text, hypothesis.translation));
      const item = document.createElement("li");
      item.append(button);
      return item;
    }),
  );
  page.result.hidden = false;
  page.attention.hidden = true;
  shown.attention = null;
  const best = page.nBest.querySelector("button");
  if (best) {
    choose(best, text, best.querySelector(".hypothesis").textContent);
  }
}

async function choose(button, text, translation) {
  for (const other of page.nBest.querySelectorAll("button")) {
    other.setAttribute("aria-pressed", String(other === button));
  }
  clearError();
  const request = shown.request;
  try {
    const reply = await call(predictPath(), {
      signature_name: "attention",
      inputs: { text: [text], translation: [translation] },
    });
    if (request === shown.request && button.getAttribute("aria-pressed") === "true") {
      showAttention(translation, reply.outputs);
    }
  } catch (error) {
    if (error.message.includes('"attention" not found')) {
      error = new ServerError(
        `This export of ${page.model.value} has no attention signature, so no heat maps: ` +
          "export the model again with this version of keras-transformer to see them.",
      );
    }
    page.attention.hidden = true;
    showError(error);
  }
}

// -- the heat maps -------------------------------------------------------------------------

// The pieces before the first padding ("").
function unpadded(pieces) {
  const end = pieces.indexOf("");
  return end === -1 ? pieces : pieces.slice(0, end);
}

function showAttention(translation, outputs) {
  const pieces = {
    source: unpadded(outputs.source_pieces[0]),
    target: unpadded(outputs.target_pieces[0]),
  };
  shown.attention = { pieces, outputs };
  page.attentionOf.textContent = `Of the translation “${translation}”.`;
  for (const map of MAPS) {
    const weights = outputs[map.output][0]; // [layers, heads, rows, columns]
    fillSelect(document.getElementById(`${map.prefix}-layer`), weights.length, layerNames);
    fillSelect(document.getElementById(`${map.prefix}-head`), weights[0].length, headNames);
  }
  page.attention.hidden = false;
  drawMaps();
}

function layerNames(count) {
  // The last layer first selected, as `keras-transformer attention` draws it.
  return Array.from({ length: count }, (_, i) => [String(i), `${i + 1} of ${count}`, i === count - 1]);
}

function headNames(count) {
  const heads = Array.from({ length: count }, (_, i) => [String(i), `${i + 1}`, false]);
  return [["mean", `average of ${count}`, true], ...heads];
}

// Options of a select from `names(count)`, keeping the chosen one if it still exists.
function fillSelect(select, count, names) {
  const before = select.value;
  select.replaceChildren(
    ...names(count).map(([value, text, chosen]) => new Option(text, value, chosen, chosen)),
  );
  if ([...select.options].some((option) => option.value === before)) {
    select.value = before;
  }
}

function drawMaps() {
  if (shown.attention === null) {
    return;
  }
  const { pieces, outputs } = shown.attention;
  for (const map of MAPS) {
    const layer = Number(document.getElementById(`${map.prefix}-layer`).value);
    const head = document.getElementById(`${map.prefix}-head`).value;
    const heads = outputs[map.output][0][layer]; // [heads, rows, columns]
    const weights = head === "mean" ? mean(heads) : heads[Number(head)];
    const rows = pieces[map.rows];
    drawMap(document.getElementById(`${map.prefix}-map`), rows, pieces.source, weights);
  }
}

// The element-wise mean of equally shaped matrices.
function mean(matrices) {
  return matrices[0].map((row, i) =>
    row.map((_, j) => matrices.reduce((sum, matrix) => sum + matrix[i][j], 0) / matrices.length),
  );
}

// A table of `rows` × `columns` pieces, each cell shaded by its weight: white for 0, dark blue
// for the map's largest weight, so that an untrained model's nearly even attention shows too.
function drawMap(table, rows, columns, weights) {
  const largest = Math.max(...weights.flat(), Number.MIN_VALUE);
  const box = table.parentElement;
  // Square cells that fill the box's width beside the row labels, and stay large enough to see;
  // a map still too wide scrolls within its box.
  const cell = Math.max(12, Math.min(32, Math.floor((box.clientWidth - 100) / columns.length)));
  table.style.setProperty("--cell", `${cell}px`);
  const head = document.createElement("tr");
  head.append(document.createElement("td"));
  for (const piece of columns) {
    head.append(header(piece, "col"));
  }
  const body = rows.map((piece, i) => {
    const row = document.createElement("tr");
    row.append(header(piece, "row"));
    columns.forEach((column, j) => row.append(weightCell(weights[i][j], largest, piece, column)));
    return row;
  });
  const thead = document.createElement("thead");
  thead.append(head);
  const tbody = document.createElement("tbody");
  tbody.append(...body);
  table.replaceChildren(thead, tbody);
}

function header(piece, scope) {
  const th = document.createElement("th");
  th.scope = scope;
  th.textContent = piece;
  th.title = piece;
  return th;
}

function weightCell(weight, largest, row, column) {
  const td = document.createElement("td");
  td.dataset.weight = String(weight);
  td.title = `${row} → ${column}: ${weight.toFixed(3)}`;
  td.style.backgroundColor = `hsl(215 80% ${Math.round(100 - 70 * (weight / largest))}%)`;
  const value = document.createElement("span");
  value.className = "visually-hidden";
  value.textContent = weight.toFixed(2);
  td.append(value);
  return td;
}

// -- wiring ----------------------------------------------------------------------------------

page.form.addEventListener("submit", (event) => {
  event.preventDefault();
  translate();
});

page.source.addEventListener("keydown", (event) => {
  // Enter translates; Shift+Enter is a new line; Enter that ends an input method's composition
  // (Japanese, Chinese) only ends it.
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    page.form.requestSubmit();
  }
});

page.model.addEventListener("change", describeModel);

for (const map of MAPS) {
  for (const which of ["layer", "head"]) {
    document.getElementById(`${map.prefix}-${which}`).addEventListener("change", drawMaps);
  }
}

window.addEventListener("resize", drawMaps);

loadModels().catch(showError);
