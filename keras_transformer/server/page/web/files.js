// The Files tab: a document sent to LibreTranslate's POST /translate_file (multipart `file`,
// `source`, `target`, `api_key`), which answers {"translatedFileUrl"}; the translation is then a
// link to download.
"use strict";

import { call, showError } from "./server.js";

const byId = (id) => document.getElementById(id);

export class FilesTab {
  // `fields()`: the request's other fields ({source, target, api_key}), read at each request.
  constructor(fields) {
    this.fields = fields;
    this.form = byId("file-form");
    this.file = byId("file");
    this.formats = byId("file-formats");
    this.status = byId("file-status");
    this.error = byId("file-error");
    this.download = byId("download");
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.translate();
    });
    this.file.addEventListener("change", () => {
      this.download.hidden = true;
    });
  }

  // The formats the server translates (".docx", …), offered by the file chooser.
  offer(formats) {
    this.file.accept = formats.join(",");
    this.formats.textContent = formats.length ? `Formats: ${formats.join(", ")}.` : "";
  }

  async translate() {
    const [file] = this.file.files;
    const body = new FormData();
    body.append("file", file);
    for (const [name, value] of Object.entries(this.fields())) {
      if (value !== undefined) {
        body.append(name, value);
      }
    }
    this.error.textContent = "";
    this.download.hidden = true;
    this.status.textContent = `Translating ${file.name}…`;
    try {
      const reply = await call("/translate_file", body);
      this.download.href = reply.translatedFileUrl;
      this.download.hidden = false;
      this.status.textContent = `${file.name} is translated.`;
      this.download.focus();
    } catch (error) {
      this.status.textContent = "";
      showError(this.error, error);
    }
  }
}
