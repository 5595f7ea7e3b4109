// The ceremony page: fetch a fresh call-bound challenge, sign it with a passkey, post the
// assertion to this ceremony's callback. Only the Reject button rejects (§3.7's "user
// cancellation"); a dismissed or failed passkey prompt leaves the call waiting, to try again.
"use strict";

(() => {
  const root = document.getElementById("ceremony");
  if (!root) return;
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const status = document.getElementById("status");
  const countdown = document.getElementById("countdown");
  const approve = document.getElementById("approve");
  const reject = document.getElementById("reject");
  const retryHelp = document.getElementById("retry-help");
  const cannotClose = document.getElementById("cannot-close");
  const deadline = Date.now() + Number(root.dataset.secondsLeft) * 1000;
  let timer = null;

  const say = (text, isError = false) => {
    status.textContent = text;
    status.classList.toggle("error", isError);
    retryHelp.hidden = true;
  };

  const setBusy = (busy) => {
    for (const button of [approve, reject]) if (button) button.disabled = busy;
  };

  // Done: say so, stop everything, and close the window if the browser lets a page do that
  // (only windows a script opened); if it stays open, say so and show the way back.
  const finish = (state, text) => {
    root.dataset.state = state;
    say(text);
    clearInterval(timer);
    for (const el of root.querySelectorAll(".actions")) el.remove();
    setTimeout(() => {
      window.close();
      setTimeout(() => { if (!window.closed) cannotClose.hidden = false; }, 300);
    }, 1500);
  };

  // A page that no longer answers (its call decided by another approver closes it) is said
  // so, never a page stuck at its last step with its buttons disabled.
  const UNANSWERED = "This page no longer answers: the call may have been decided by someone " +
    "else, and this page closed. Nothing was approved by you here: open the call from the " +
    "host's approvals to see where it stands.";

  const post = async (url, body) => {
    let response;
    try {
      response = await fetch(url, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRFToken": csrf },
        body: JSON.stringify(body || {}),
      });
    } catch (error) {
      return { ok: false, status: 0, data: { error: UNANSWERED } };
    }
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
      setBusy(false);
      // Dismissed, timed out, or no passkey of this user in this browser (the browser does not
      // tell which): nothing was decided, and the call still waits.
      if (error.name === "NotAllowedError" || error.name === "AbortError") {
        say("No passkey signed this approval: the call is still waiting.", true);
        retryHelp.hidden = false;
        return;
      }
      return say(`The passkey prompt failed (${error.name}: ${error.message}); ` +
        "the call is still waiting: try again.", true);
    }
    say("Checking…");
    const answer = await post(root.dataset.assertionUrl, credential.toJSON());
    if (answer.ok) return finish("approved", "Approved. The call runs now; this page is done.");
    if (closed(answer)) return finish("expired", answer.data.error);
    say(answer.data.error || "The approval was refused.", true);
    setBusy(false);
  });
})();
