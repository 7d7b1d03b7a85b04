// The REST API under /api/v1, with the user's key. The key lives in memory for fetch (sent as
// X-API-Key) and in the ``kloom_key`` cookie, which is how EventSource authenticates: browsers
// send no custom headers on event streams. SameSite=Strict keeps other sites from riding on it.

export const API = "/api/v1";
const COOKIE = "kloom_key";

let key = readCookie();

function readCookie() {
  const found = document.cookie.split("; ").find((c) => c.startsWith(`${COOKIE}=`));
  return found ? decodeURIComponent(found.slice(COOKIE.length + 1)) : "";
}

/** The key in memory, or the cookie's (another tab may have signed in since this one loaded). */
function currentKey() {
  if (!key) key = readCookie();
  return key;
}

export function hasKey() {
  return Boolean(currentKey());
}

export function setKey(value) {
  key = value;
  const secure = location.protocol === "https:" ? "; Secure" : "";
  document.cookie = `${COOKIE}=${encodeURIComponent(value)}; Path=/; SameSite=Strict; Max-Age=${30 * 24 * 3600}${secure}`;
}

export function clearKey() {
  key = "";
  document.cookie = `${COOKIE}=; Path=/; SameSite=Strict; Max-Age=0`;
}

/** An error answer of the API: its status and its ``detail`` message. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function request(method, path, body) {
  const headers = currentKey() ? { "X-API-Key": key } : {};
  let payload;
  if (body instanceof FormData) payload = body;
  else if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    payload = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(API + path, { method, headers, body: payload, credentials: "same-origin" });
  } catch (err) {
    throw new ApiError(0, `the API cannot be reached (${err.message}); is the service running?`);
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { detail: text.slice(0, 300) };
  }
  if (!response.ok) {
    const detail = typeof data?.detail === "string" ? data.detail : JSON.stringify(data?.detail ?? response.statusText);
    if (response.status === 401) window.dispatchEvent(new CustomEvent("kloom:unauthorized", { detail }));
    throw new ApiError(response.status, detail);
  }
  return data;
}

export const get = (path) => request("GET", path);
export const post = (path, body) => request("POST", path, body);

/** A query string from an object, leaving out empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  const text = q.toString();
  return text ? `?${text}` : "";
}

/** Every step of a job, page by page (``?after=N``). */
export async function allSteps(jobId) {
  const steps = [];
  let after = -1;
  for (;;) {
    const page = await get(`/jobs/${encodeURIComponent(jobId)}/steps${query({ after, limit: 500 })}`);
    steps.push(...page.data);
    if (page.data.length < 500) return steps;
    after = page.data[page.data.length - 1].index;
  }
}
