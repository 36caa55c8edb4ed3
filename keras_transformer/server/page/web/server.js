// Requests to the server's own APIs: their JSON replies, or a ServerError that says why not.
"use strict";

export class ServerError extends Error {}

// The body and headers of a POST of `body`: a FormData as multipart (a file), else JSON.
function postOf(body) {
  if (body instanceof FormData) {
    return { method: "POST", body };
  }
  return { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
}

// The JSON reply of GET `path`, or of POST `body` to it. `signal` (an AbortController's) drops
// the request: the promise then rejects with the browser's AbortError, which callers ignore.
export async function call(path, body, signal) {
  const options = { signal, ...(body === undefined ? {} : postOf(body)) };
  let response;
  try {
    response = await fetch(path, options);
  } catch (error) {
    if (error.name === "AbortError") {
      throw error;
    }
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

// Shows `error` as text in the alert region `region`; an aborted request shows nothing.
export function showError(region, error) {
  if (error.name !== "AbortError") {
    region.textContent = error instanceof ServerError ? error.message : `Error: ${error}`;
  }
}
