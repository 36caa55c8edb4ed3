// The translator: the languages of LibreTranslate's GET /languages (and "Detect", its `auto`),
// the text translated as it is typed by its POST /translate, the server's settings from its
// GET /frontend/settings (the character limit, keys, files), and the pair and text kept in the
// URL as LibreTranslate's page keeps them (?source=&target=&q=). The model that translates the
// pair (from GET /v1/models) is the one the Inspect panel (inspect.js) looks into; the Files tab
// is files.js's. Every failure is shown as text in an alert region.
"use strict";

import { Inspector } from "./inspect.js";
import { FilesTab } from "./files.js";
import { call, ServerError, showError } from "./server.js";

const DETECT = "auto"; // LibreTranslate's source for "detect the language"

const byId = (id) => document.getElementById(id);

const page = {
  sourceLanguage: byId("source-language"),
  targetLanguage: byId("target-language"),
  swap: byId("swap"),
  apiKeyField: byId("api-key-field"),
  apiKey: byId("api-key"),
  source: byId("source"),
  charCount: byId("char-count"),
  detected: byId("detected"),
  translation: byId("translation"),
  status: byId("status"),
  copy: byId("copy"),
  error: byId("error"),
  textTab: byId("text-tab"),
  filesTab: byId("files-tab"),
};

// What the page knows and has asked: the server's settings (/frontend/settings), the languages
// ({code: {name, targets}}), the models' pairs, the language detected in the text shown, and
// the translation in flight (its number, so that a late reply to an older one is dropped, and
// its AbortController).
const state = {
  settings: null,
  languages: new Map(),
  models: [],
  detected: undefined,
  request: 0,
  inFlight: null,
  timer: undefined,
};

const inspector = new Inspector();
const filesTab = new FilesTab(() => ({ ...pair(), api_key: apiKey() }));

// -- the server's settings, languages and models ------------------------------------------

// LibreTranslate's /frontend/settings: the character limit, keys, files, default languages, and
// the pause after typing before the text is translated (`frontendTimeout`).
async function loadSettings() {
  state.settings = await call("/frontend/settings");
  page.apiKeyField.hidden = !(state.settings.keyRequired || state.settings.apiKeys);
  page.apiKey.required = Boolean(state.settings.keyRequired);
  page.apiKey.value = localStorage.getItem("api_key") || "";
  if (state.settings.charLimit >= 0) {
    page.source.maxLength = state.settings.charLimit;
  }
  page.filesTab.hidden = !state.settings.filesTranslation;
  filesTab.offer(state.settings.supportedFilesFormat);
}

async function loadLanguages() {
  const [languages, models] = await Promise.all([call("/languages"), call("/v1/models")]);
  state.languages = new Map(languages.map((language) => [language.code, language]));
  state.models = servedModels(models.models);
  const sources = languages.filter((language) => language.targets.length > 0).sort(byName);
  if (sources.length === 0) {
    throw new ServerError("The server has no model available yet: reload the page later.");
  }
  page.sourceLanguage.replaceChildren(
    new Option("Detect the language", DETECT),
    ...sources.map((language) => new Option(language.name, language.code)),
  );
}

// [{name, version, source, targets: [{code, token}]}] of the models with an AVAILABLE version
// (the newest: the one a request without a version gets), ordered by name, as the server picks
// the first by name for a pair that several translate.
function servedModels(models) {
  const served = [];
  for (const model of models) {
    const available = model.versions.filter((version) => version.state === "AVAILABLE");
    available.sort((a, b) => Number(b.version) - Number(a.version));
    const version = available[0];
    if (version === undefined || !version.source_language) {
      continue;
    }
    const tokens = Object.entries(version.target_language_tokens || {});
    const targets = tokens.length ? tokens : [[version.target_language, ""]];
    served.push({
      name: model.name,
      version,
      source: version.source_language,
      targets: targets.map(([code, token]) => ({ code, token })),
    });
  }
  return served.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

// An export's recorded code ("en", "eng") as a tag to compare with /languages' codes.
function canonical(code) {
  try {
    return Intl.getCanonicalLocales(code)[0].toLowerCase();
  } catch {
    return String(code).toLowerCase();
  }
}

// Whether an export's recorded code names /languages' `code`: the same tag, or its language
// ("zh" for "zh-Hans").
function names(recorded, code) {
  const [tag, wanted] = [canonical(recorded), canonical(code)];
  return tag === wanted || tag === wanted.split("-")[0];
}

// The model translating `source` into `target`, as the Inspect panel needs it, or null.
function routeOf(source, target) {
  for (const model of state.models) {
    const into = model.targets.find((candidate) => names(candidate.code, target));
    if (into && names(model.source, source)) {
      const megabytes = (model.version.weight_bytes / 1e6).toFixed(1);
      const details = `Model ${model.name}, version ${model.version.version}, ${megabytes} MB of weights.`;
      return { model: model.name, token: into.token, details, search: model.version.search };
    }
  }
  return null;
}

// -- the pickers and the URL ----------------------------------------------------------------

function pair() {
  return { source: page.sourceLanguage.value, target: page.targetLanguage.value };
}

function apiKey() {
  return page.apiKey.value || undefined;
}

// Languages in the order of their names, as a person looks for them.
function byName(a, b) {
  return a.name.localeCompare(b.name, "en");
}

function languageName(code) {
  return state.languages.get(code)?.name || code;
}

// The targets of the chosen source (of every source, for "Detect"), the chosen one kept.
function fillTargets(wanted) {
  const source = page.sourceLanguage.value;
  const sources = source === DETECT ? [...state.languages.values()] : [state.languages.get(source)];
  const codes = [...new Set(sources.flatMap((language) => language.targets))];
  const targets = codes.map((code) => ({ code, name: languageName(code) })).sort(byName);
  const keep = wanted || page.targetLanguage.value;
  page.targetLanguage.replaceChildren(...targets.map(({ code, name }) => new Option(name, code)));
  if (codes.includes(keep)) {
    page.targetLanguage.value = keep;
  }
  updateSwap();
}

// The source language a swap makes the target: the chosen one, or the one detected.
function swapTarget() {
  const source = page.sourceLanguage.value;
  return source === DETECT ? state.detected : source;
}

function updateSwap() {
  const into = swapTarget();
  const from = state.languages.get(page.targetLanguage.value);
  const possible = Boolean(into && from?.targets.includes(into));
  page.swap.disabled = !possible;
  page.swap.title = possible
    ? `Translate from ${languageName(page.targetLanguage.value)} into ${languageName(into)}`
    : "No model translates this pair the other way";
}

function swap() {
  const into = swapTarget();
  const translation = page.translation.value;
  page.sourceLanguage.value = page.targetLanguage.value;
  fillTargets(into);
  if (translation) {
    page.source.value = translation;
  }
  translateNow();
}

// The pair and text as the URL's query, so that a link shows the same translation.
function keepInUrl() {
  const query = new URLSearchParams({ ...pair(), q: page.source.value });
  history.replaceState(null, "", `${location.pathname}?${query}`);
}

function pickFromUrl() {
  const query = new URLSearchParams(location.search);
  const defaults = state.settings.language;
  const source = query.get("source") || defaults.source.code;
  if ([...page.sourceLanguage.options].some((option) => option.value === source)) {
    page.sourceLanguage.value = source;
  }
  fillTargets(query.get("target") || defaults.target.code);
  if (query.has("q")) {
    page.source.value = query.get("q");
  }
}

// -- translating ------------------------------------------------------------------------------

// Characters as LibreTranslate counts them (code points, not UTF-16 units).
function characters(text) {
  return [...text].length;
}

function countCharacters() {
  const count = characters(page.source.value);
  const limit = state.settings.charLimit;
  page.charCount.textContent = limit >= 0 ? `${count} / ${limit}` : `${count} characters`;
  const over = limit >= 0 && count > limit;
  page.source.setAttribute("aria-invalid", String(over));
  return over ? `The text is longer than the server's limit of ${limit} characters.` : null;
}

// Whether the settings and languages are loaded; a text typed before is translated then.
function ready() {
  return page.targetLanguage.options.length > 0;
}

function scheduleTranslation() {
  if (!ready()) {
    return;
  }
  clearTimeout(state.timer);
  countCharacters();
  state.timer = setTimeout(translateNow, state.settings.frontendTimeout);
}

function clearTranslation() {
  page.translation.value = "";
  page.detected.textContent = "";
  page.copy.disabled = true;
  state.detected = undefined;
  updateSwap();
  inspector.forget();
}

async function translateNow() {
  if (!ready()) {
    return;
  }
  clearTimeout(state.timer);
  state.inFlight?.abort();
  const request = ++state.request;
  page.error.textContent = "";
  keepInUrl();
  const text = page.source.value;
  const tooLong = countCharacters();
  if (text.trim() === "" || tooLong) {
    clearTranslation();
    page.status.textContent = "";
    page.error.textContent = tooLong || "";
    return;
  }
  const controller = new AbortController();
  state.inFlight = controller;
  page.status.textContent = "Translating…";
  const { source, target } = pair();
  try {
    const body = { q: text, source, target, format: "text", api_key: apiKey() };
    const reply = await call("/translate", body, controller.signal);
    if (request === state.request) {
      showTranslation(text, source, target, reply);
    }
  } catch (error) {
    if (request === state.request) {
      clearTranslation();
      showError(page.error, error);
    }
  } finally {
    if (request === state.request) {
      page.status.textContent = "";
    }
  }
}

function showTranslation(text, source, target, reply) {
  page.translation.value = reply.translatedText;
  page.copy.disabled = false;
  const detected = reply.detectedLanguage;
  page.detected.textContent = detected
    ? `Detected: ${languageName(detected.language)} (${detected.confidence}%)`
    : "";
  state.detected = detected?.language;
  updateSwap();
  inspector.show(text, routeOf(detected ? detected.language : source, target));
}

// The translation on the clipboard: by the Clipboard API where the page may use it (a secure
// context: HTTPS, or this machine), else by the copy command, the one way a page served over
// plain HTTP has.
async function copyTranslation() {
  const text = page.translation.value;
  try {
    if (navigator.clipboard) {
      await navigator.clipboard.writeText(text);
    } else {
      copyByCommand(text);
    }
    page.status.textContent = "Copied.";
  } catch (error) {
    showError(page.error, new ServerError(`The browser did not copy the text (${error.message}).`));
  }
}

function copyByCommand(text) {
  const put = (event) => {
    event.clipboardData.setData("text/plain", text);
    event.preventDefault();
  };
  document.addEventListener("copy", put);
  const copied = document.execCommand("copy");
  document.removeEventListener("copy", put);
  if (!copied) {
    throw new Error("the browser refused the copy command");
  }
}

// -- the tabs ------------------------------------------------------------------------------------

function chooseTab(tab) {
  for (const other of [page.textTab, page.filesTab]) {
    const chosen = other === tab;
    other.setAttribute("aria-selected", String(chosen));
    other.tabIndex = chosen ? 0 : -1;
    byId(other.getAttribute("aria-controls")).hidden = !chosen;
  }
  tab.focus();
}

// The tabs' keys (WAI-ARIA's tabs pattern): the arrows move between the tabs shown.
function tabKey(event) {
  const tabs = [page.textTab, page.filesTab].filter((tab) => !tab.hidden);
  const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
  if (step !== undefined) {
    event.preventDefault();
    chooseTab(tabs[(tabs.indexOf(event.target) + step + tabs.length) % tabs.length]);
  }
}

// -- wiring ----------------------------------------------------------------------------------

page.source.addEventListener("input", scheduleTranslation);
page.source.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    translateNow();
  }
});
page.sourceLanguage.addEventListener("change", () => {
  fillTargets();
  translateNow();
});
page.targetLanguage.addEventListener("change", () => {
  updateSwap();
  translateNow();
});
page.swap.addEventListener("click", swap);
page.copy.addEventListener("click", copyTranslation);
page.apiKey.addEventListener("change", () => localStorage.setItem("api_key", page.apiKey.value));
for (const tab of [page.textTab, page.filesTab]) {
  tab.addEventListener("click", () => chooseTab(tab));
  tab.addEventListener("keydown", tabKey);
}

async function start() {
  await Promise.all([loadSettings(), loadLanguages()]);
  pickFromUrl();
  countCharacters();
  if (page.source.value) {
    translateNow();
  }
}

start().catch((error) => showError(page.error, error));
