// The build page's controls: rerun and cancel with the submit token, typed into the page and sent
// in the Authorization header of that one request; never put in a URL, a cookie or storage.
"use strict";

async function runControl(button) {
  const box = button.closest(".controls");
  const input = box.querySelector(".control-token");
  const out = box.querySelector(".control-result");
  const token = input.value.trim();
  if (!token) {
    out.textContent = "Enter the submit token first.";
    input.focus();
    return;
  }
  let url = button.dataset.action;
  const job = box.querySelector(".control-job");
  if (url.includes("{job}")) url = url.replace("{job}", encodeURIComponent(job.value));
  button.disabled = true;
  out.textContent = "Sending…";
  try {
    const resp = await fetch(url, {
      method: "POST",
      headers: { Authorization: "Bearer " + token },
      credentials: "omit",
      cache: "no-store",
    });
    const body = await resp.json().catch(() => null);
    if (!resp.ok) {
      const err = body && body.error;
      out.textContent = err ? err.code + ": " + err.message : "HTTP " + resp.status;
      if (resp.status === 401 || resp.status === 403) {
        input.value = ""; // a refused token is not left in the field to be sent again
        input.focus();
      }
      return;
    }
    input.value = "";
    if (body && body.url) {
      out.textContent = "Queued as build " + body.build_id + ".";
      location.assign(body.url);
    } else {
      out.textContent = "Done.";
      location.reload();
    }
  } catch (error) {
    out.textContent = "The request failed: " + error;
  } finally {
    button.disabled = false;
  }
}

// Delegated: the live page swaps its content in when a build finishes.
document.addEventListener("click", (event) => {
  const button = event.target.closest(".controls button[data-action]");
  if (button) runControl(button);
});
