// The privacy page: announce what an htmx action did (the server names it in HX-Trigger).
document.addEventListener("memory-changed", (event) => {
  const status = document.getElementById("memory-status");
  if (status && event.detail && event.detail.message) {
    status.textContent = event.detail.message;
  }
});

// The search announces how many facts it left (the list itself is swapped silently).
document.addEventListener("memory-searched", (event) => {
  const status = document.getElementById("memory-search-status");
  if (status && event.detail && event.detail.message) {
    status.textContent = event.detail.message;
  }
});
