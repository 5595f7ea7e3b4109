// The way from the host's port to a ceremony's own loopback page (localhost mode): the page's
// link, followed at once. A link, not a redirect: the CSP's form-action stops any redirect that
// follows a form (the "Open the approval page" button, the sign-in) at another origin.
"use strict";

(() => {
  const go = document.getElementById("go");
  const loopback = /^http:\/\/localhost:\d+\/passkey\/ceremonies\/[\w-]+\/$/;
  if (go && loopback.test(go.href)) location.replace(go.href);
})();
