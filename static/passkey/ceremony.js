// The ceremony page: fetch a fresh call-bound challenge, sign it with a passkey, post the
// assertion to this ceremony's callback. Reject is a button; cancel and expiry end it too.
"use strict";

(() => {
  const root = document.getElementById("ceremony");
  if (!root) return;
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const status = document.getElementById("status");
  const countdown = document.getElementById("countdown");
  const approve = document.getElementById("approve");
  const reject = document.getElementById("reject");
  const deadline = Date.now() + Number(root.dataset.secondsLeft) * 1000;
  let timer = null;

  const say = (text, isError = false) => {
    status.textContent = text;
    status.classList.toggle("error", isError);
  };

  const setBusy = (busy) => {
    for (const button of [approve, reject]) if (button) button.disabled = busy;
  };

  // Done: say so, stop everything, and close the window if the browser lets a page do that.
  const finish = (state, text) => {
    root.dataset.state = state;
    say(text);
    clearInterval(timer);
    for (const el of root.querySelectorAll(".actions")) el.remove();
    setTimeout(() => window.close(), 1500);
  };

  const post = async (url, body) => {
    const response = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf },
      body: JSON.stringify(body || {}),
    });
    const data = await response.json().catch(() => ({}));
    return { ok: response.ok, status: response.status, data };
  };

  const closed = (answer) => answer.status === 410;

  const decline = async (text) => {
    setBusy(true);
    const answer = await post(root.dataset.rejectUrl);
    if (answer.ok) finish("rejected", text);
    else if (closed(answer)) finish(root.dataset.state, answer.data.error);
    else { say(answer.data.error || "Could not reject.", true); setBusy(false); }
  };

  const tick = () => {
    const left = Math.max(0, Math.ceil((deadline - Date.now()) / 1000));
    const minutes = Math.floor(left / 60);
    countdown.textContent = `(${minutes}:${String(left % 60).padStart(2, "0")} left)`;
    countdown.classList.toggle("soon", left <= 60);
    if (left === 0) finish("expired", "Expired: nobody approved in time, nothing ran.");
  };

  if (root.dataset.state === "pending") {
    tick();
    timer = setInterval(tick, 1000);
  }

  if (reject) reject.addEventListener("click", () => decline("Rejected: nothing ran."));

  if (approve) approve.addEventListener("click", async () => {
    setBusy(true);
    say("Asking for a challenge…");
    const challenge = await post(root.dataset.challengeUrl);
    if (!challenge.ok) {
      if (closed(challenge)) return finish("expired", challenge.data.error);
      say(challenge.data.error || "Could not get a challenge.", true);
      return setBusy(false);
    }
    say("Confirm with your passkey…");
    let credential;
    try {
      const options = PublicKeyCredential.parseRequestOptionsFromJSON(challenge.data.publicKey);
      credential = await navigator.credentials.get({ publicKey: options });
    } catch (error) {
      // The approver cancelled (or let the prompt time out): nothing may run (§3.7).
      if (error.name === "NotAllowedError" || error.name === "AbortError") {
        return decline("Cancelled: nothing was approved and nothing ran.");
      }
      say(`The passkey prompt failed: ${error.message}`, true);
      return setBusy(false);
    }
    say("Checking…");
    const answer = await post(root.dataset.assertionUrl, credential.toJSON());
    if (answer.ok) return finish("approved", "Approved. The call runs now; this page is done.");
    if (closed(answer)) return finish("expired", answer.data.error);
    say(answer.data.error || "The approval was refused.", true);
    setBusy(false);
  });
})();
