// The console's entry: draws the page the address names, and follows links without reloading.

import * as jobs from "./jobs.js";
import * as job from "./job.js";
import * as compare from "./compare.js";
import * as create from "./create.js";
import * as alarms from "./alarms.js";
import * as tuningJobs from "./tuning-jobs.js";
import * as tuningJob from "./tuning-job.js";
import {h, clear} from "./dom.js";
import {navigate, setRouteHandler} from "./router.js";

const ROUTES = [
  [/^\/$/, jobs, () => ({})],
  [/^\/jobs\/([^/]+)\/?$/, job, (m) => ({name: decodeURIComponent(m[1])})],
  [
    /^\/compare\/?$/,
    compare,
    (m, query) => ({
      jobs: (query.get("jobs") || "")
        .split(",")
        .map((s) => s.trim())
        .filter(Boolean),
    }),
  ],
  [/^\/new\/?$/, create, () => ({})],
  [/^\/alarms\/?$/, alarms, () => ({})],
  [/^\/alarms\/([^/]+)\/?$/, alarms, (m) => ({name: decodeURIComponent(m[1])})],
  [/^\/tuning\/?$/, tuningJobs, () => ({})],
  [/^\/tuning\/([^/]+)\/?$/, tuningJob, (m) => ({name: decodeURIComponent(m[1])})],
];

const root = document.getElementById("app");
let unmount = null;

/** The page at ``path`` and its parameters, or null. */
function route(path, query = new URLSearchParams()) {
  for (const [pattern, page, params] of ROUTES) {
    const found = pattern.exec(path);
    if (found) return {page, params: params(found, query)};
  }
  return null;
}

function show() {
  if (unmount) unmount();
  unmount = null;
  const found = route(location.pathname, new URLSearchParams(location.search));
  window.scrollTo(0, 0);
  for (const link of document.querySelectorAll(".topbar nav a")) {
    const href = link.getAttribute("href"); // a page's own pages too: /tuning/NAME is Tuning's
    link.classList.toggle("active", href === location.pathname || (href !== "/" && location.pathname.startsWith(href + "/")));
  }
  if (!found) {
    clear(root, h("h1", {}, "Not found"), h("p", {}, "There is no page here. ", h("a", {href: "/"}, "See the jobs.")));
    return;
  }
  // each page draws into an element of its own: a page left while it loads draws what comes back for it
  // (an answer, an error) into that element, no longer shown, never over the page that followed
  const own = document.createElement("div");
  root.replaceChildren(own);
  unmount = found.page.mount(own, found.params) || null;
}

// links to our own pages change the page without loading it again
document.addEventListener("click", (e) => {
  const link = e.target.closest("a[href]");
  if (!link || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  if (link.target || link.origin !== location.origin || !route(link.pathname)) return;
  e.preventDefault();
  if (link.pathname + link.search !== location.pathname + location.search) navigate(link.pathname + link.search);
});

window.addEventListener("popstate", show);
setRouteHandler(show);
show();
