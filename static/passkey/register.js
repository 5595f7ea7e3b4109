// Registration: creation options from the host, navigator.credentials.create(), and the
// new credential back to the host. It approves nothing.
"use strict";

(() => {
  const form = document.getElementById("register");
  if (!form) return;
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const status = document.getElementById("status");

  const say = (text, isError = false) => {
    status.textContent = text;
    status.classList.toggle("error", isError);
  };

  const post = async (url, body) => {
    const response = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf },
      body: JSON.stringify(body || {}),
    });
    const data = await response.json().catch(() => ({}));
    return { ok: response.ok, data };
  };

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const button = form.querySelector("button");
    button.disabled = true;
    try {
      const options = await post(form.dataset.optionsUrl);
      if (!options.ok) return say(options.data.error || "Could not start.", true);
      say("Create the passkey on your authenticator…");
      let credential;
      try {
        credential = await navigator.credentials.create({
          publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(options.data.publicKey),
        });
      } catch (error) {
        return say(`No passkey was created: ${error.message}`, true);
      }
      const name = form.elements.name.value;
      const saved = await post(form.dataset.verifyUrl, { name, credential: credential.toJSON() });
      if (!saved.ok) return say(saved.data.error || "The passkey was not accepted.", true);
      say(`Registered “${saved.data.name}”.`);
      const next = form.dataset.next;
      setTimeout(() => { window.location.assign(next || window.location.pathname); }, 800);
    } finally {
      button.disabled = false;
    }
  });
})();
