// Client-side navigation: the pages are /, /jobs/NAME, /compare?jobs=A,B, /new, /alarms,
// /alarms/NAME, /tuning and /tuning/NAME, all served as index.html; app.js draws the one the address
// names.

let onChange = () => {};

export function setRouteHandler(handler) {
  onChange = handler;
}

export function navigate(url, {replace = false} = {}) {
  if (replace) history.replaceState(null, "", url);
  else history.pushState(null, "", url);
  onChange();
}
