// The Inspect panel: for the text on the page and the model that translates its pair, the
// n-best list of the `translate_options` signature, and the attention of the chosen translation
// from the `attention` signature, drawn as heat maps (the paper's Figures 3-5). Asked of the
// server only while the panel is open.
"use strict";

import { call, ServerError, showError } from "./server.js";

// §6.1's search (beam 4, length penalty α = 0.6, output up to the input's length + 50), for an
// export that does not record its own; `translate_options` takes these three as inputs.
const PAPER_SEARCH = { beam_size: 4, alpha: 0.6, extra_length: 50 };

// The search of `route`'s export (an imported model's is its checkpoint's), as the inputs of
// `translate_options`.
function searchOf(route) {
  const search = route.search || PAPER_SEARCH;
  return { beam_size: search.beam_size, alpha: search.alpha, extra_length: search.extra_length };
}

// The two heat maps: which output of the `attention` signature, and which pieces are its rows.
const MAPS = [
  { output: "encoder_decoder_attention", rows: "target", prefix: "cross" },
  { output: "encoder_self_attention", rows: "source", prefix: "self" },
];

const byId = (id) => document.getElementById(id);

export class Inspector {
  constructor() {
    this.panel = byId("inspect");
    this.details = byId("model-details");
    this.error = byId("inspect-error");
    this.result = byId("result");
    this.nBest = byId("n-best");
    this.attention = byId("attention");
    this.attentionOf = byId("attention-of");
    // What to inspect ({text, route}), whether it is shown, the attention drawn, and a count of
    // the texts asked for, so that a late reply to an older one is dropped.
    this.subject = null;
    this.loaded = false;
    this.drawn = null;
    this.request = 0;
    this.panel.addEventListener("toggle", () => this.panel.open && this.load());
    for (const map of MAPS) {
      for (const which of ["layer", "head"]) {
        byId(`${map.prefix}-${which}`).addEventListener("change", () => this.drawMaps());
      }
    }
    window.addEventListener("resize", () => this.drawMaps());
  }

  // `text`, translated by `route` ({model, token, details, search}; null when no model is
  // known for the pair): shown now if the panel is open, else when it is opened.
  show(text, route) {
    this.subject = { text, route };
    this.loaded = false;
    this.details.textContent = route ? route.details : "";
    this.load();
  }

  // Nothing to inspect (no translation shown).
  forget() {
    this.subject = null;
    this.request += 1; // a reply still on its way is dropped
    this.details.textContent = "";
    this.error.textContent = "";
    this.result.hidden = true;
    this.attention.hidden = true;
  }

  async load() {
    if (!this.panel.open || this.loaded || this.subject === null) {
      return;
    }
    this.loaded = true;
    const request = ++this.request;
    this.error.textContent = "";
    const { text, route } = this.subject;
    try {
      if (route === null) {
        throw new ServerError("No model the page can name translates this pair of languages.");
      }
      const input = route.token ? `${route.token} ${text}` : text;
      const reply = await call(predictPath(route), {
        signature_name: "translate_options",
        inputs: { text: [input], ...searchOf(route) },
      });
      if (request === this.request) {
        this.showTranslations(route, input, reply.outputs, request);
      }
    } catch (error) {
      if (request === this.request) {
        this.result.hidden = true;
        this.attention.hidden = true;
        showError(this.error, error);
      }
    }
  }

  showTranslations(route, input, outputs, request) {
    const hypotheses = outputs.n_best_translations[0]
      .map((translation, i) => ({ translation, score: outputs.n_best_scores[0][i] }))
      .filter((hypothesis) => hypothesis.translation !== ""); // slots the search left empty
    this.nBest.replaceChildren(
      ...hypotheses.map((hypothesis) => {
        const button = hypothesisButton(hypothesis);
        button.addEventListener("click", () =>
          this.choose(button, route, input, hypothesis.translation, request),
        );
        const item = document.createElement("li");
        item.append(button);
        return item;
      }),
    );
    this.result.hidden = false;
    this.attention.hidden = true;
    this.drawn = null;
    const best = this.nBest.querySelector("button");
    if (best) {
      this.choose(best, route, input, hypotheses[0].translation, request);
    }
  }

  async choose(button, route, input, translation, request) {
    for (const other of this.nBest.querySelectorAll("button")) {
      other.setAttribute("aria-pressed", String(other === button));
    }
    this.error.textContent = "";
    try {
      const reply = await call(predictPath(route), {
        signature_name: "attention",
        inputs: { text: [input], translation: [translation] },
      });
      if (request === this.request && button.getAttribute("aria-pressed") === "true") {
        this.showAttention(translation, reply.outputs);
      }
    } catch (error) {
      if (error.message.includes('"attention" not found')) {
        error = new ServerError(
          `This export of ${route.model} has no attention signature, so no heat maps: ` +
            "export the model again with this version of keras-transformer to see them.",
        );
      }
      this.attention.hidden = true;
      showError(this.error, error);
    }
  }

  showAttention(translation, outputs) {
    const pieces = {
      source: unpadded(outputs.source_pieces[0]),
      target: unpadded(outputs.target_pieces[0]),
    };
    this.drawn = { pieces, outputs };
    this.attentionOf.textContent = `Of the translation “${translation}”.`;
    for (const map of MAPS) {
      const weights = outputs[map.output][0]; // [layers, heads, rows, columns]
      fillSelect(byId(`${map.prefix}-layer`), weights.length, layerNames);
      fillSelect(byId(`${map.prefix}-head`), weights[0].length, headNames);
    }
    this.attention.hidden = false;
    this.drawMaps();
  }

  drawMaps() {
    if (this.drawn === null || this.attention.hidden) {
      return;
    }
    const { pieces, outputs } = this.drawn;
    for (const map of MAPS) {
      const layer = Number(byId(`${map.prefix}-layer`).value);
      const head = byId(`${map.prefix}-head`).value;
      const heads = outputs[map.output][0][layer]; // [heads, rows, columns]
      const weights = head === "mean" ? mean(heads) : heads[Number(head)];
      drawMap(byId(`${map.prefix}-map`), pieces[map.rows], pieces.source, weights);
    }
  }
}

function predictPath(route) {
  return `/v1/models/${encodeURIComponent(route.model)}:predict`;
}

function hypothesisButton(hypothesis) {
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
  return button;
}

// -- the heat maps -------------------------------------------------------------------------

// The pieces before the first padding ("").
function unpadded(pieces) {
  const end = pieces.indexOf("");
  return end === -1 ? pieces : pieces.slice(0, end);
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

// The element-wise mean of equally shaped matrices.
function mean(matrices) {
  return matrices[0].map((row, i) =>
    row.map((_, j) => matrices.reduce((sum, matrix) => sum + matrix[i][j], 0) / matrices.length),
  );
}

// A table of `rows` × `columns` pieces, each cell shaded by its weight: the page's background
// for 0, the strongest shade for the map's largest weight, so that an untrained model's nearly
// even attention shows too.
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

// A cell whose opacity is its share of the largest weight (style.css gives its colour).
function weightCell(weight, largest, row, column) {
  const td = document.createElement("td");
  td.dataset.weight = String(weight);
  td.title = `${row} → ${column}: ${weight.toFixed(3)}`;
  td.style.setProperty("--share", (weight / largest).toFixed(3));
  const value = document.createElement("span");
  value.className = "visually-hidden";
  value.textContent = weight.toFixed(2);
  td.append(value);
  return td;
}
