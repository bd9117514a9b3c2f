// The admin change form's "Impact before saving" panel: posts the form as it is to /api/v1/impact/?stream=1
// (mutations/api/impact.py) and reads its NDJSON lines: progress, then the report. No inline script (CSP).
"use strict";
(function () {
  function el(tag, text, attrs) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    Object.entries(attrs || {}).forEach(([k, v]) => node.setAttribute(k, v));
    return node;
  }
  function mib(value) { return value >= 1024 ? `${(value / 1024).toFixed(1)} GiB` : `${value} MiB`; }
  function table(headers, rows) {
    const t = el("table", null, {class: "impact-table"});
    const head = el("tr"); headers.forEach((h) => head.appendChild(el("th", h)));
    t.appendChild(el("thead")).appendChild(head);
    const body = t.appendChild(el("tbody"));
    rows.forEach((cells) => {
      const tr = body.appendChild(el("tr"));
      cells.forEach((c) => { const td = tr.appendChild(el("td")); if (c instanceof Node) td.appendChild(c); else td.textContent = c; });
    });
    return t;
  }
  function grant(outcome) {
    if (outcome.decision !== "mutated") return `${outcome.decision}${outcome.decision === "denied" ? ": " + outcome.reason : ""}`;
    return outcome.grants.map((g) => `${g.container}: ${g.vgpu_number} × ${g.vgpu_memory_mib} MiB`).join(", ") + ` (${outcome.preset || "no preset"})`;
  }
  function showReport(panel, report) {
    const out = panel.querySelector("#impact-result");
    out.replaceChildren();
    const summary = el("p", `${report.admissions} admissions of the last ${report.days} days replayed ` +
      `(${report.distinct_pods} distinct Pods) in ${report.seconds} s: ${report.changed} would get a different grant, ` +
      `${report.now_denied} now denied, ${report.now_allowed} now allowed. vGPU memory granted: ` +
      `${mib(report.mib_before)} → ${mib(report.mib_after)}.`, {class: "impact-summary", id: "impact-summary"});
    out.appendChild(summary);
    const changed = report.namespaces.filter((n) => n.mib_change !== 0);
    if (changed.length) {
      out.appendChild(el("h3", "vGPU memory granted per namespace"));
      out.appendChild(table(["namespace", "before", "after", "change"],
        changed.map((n) => [n.namespace, mib(n.mib_before), mib(n.mib_after), (n.mib_change > 0 ? "+" : "") + mib(n.mib_change)])));
    }
    // CPU/memory defaults are not grants: the namespaces whose defaults change, and their admissions.
    const defaults = report.resources_changed || [];
    if (defaults.length) {
      const said = (d) => Object.entries(d).map(([k, v]) => `${k} ${v === null ? "none" : v}`).join(", ");
      out.appendChild(el("h3", "CPU and memory defaults that change", {id: "impact-resources"}));
      out.appendChild(table(["namespace", "admissions", "before", "after"],
        defaults.map((d) => [d.namespace, String(d.admissions), `${said(d.before)} (${d.policy_before})`,
                             `${said(d.after)} (${d.policy_after})`])));
    }
    if (report.examples.length) {
      out.appendChild(el("h3", "Examples"));
      const base = panel.dataset.admissionUrl.replace(/0\/$/, "");
      out.appendChild(table(["admission", "namespace", "before", "after"], report.examples.map((e) => {
        const link = el("a", e.pod || `#${e.audit_id}`, {href: `${base}${e.audit_id}/`});
        return [link, e.namespace, grant(e.before), grant(e.after)];
      })));
    }
  }
  function showErrors(panel, errors) {
    const out = panel.querySelector("#impact-result");
    out.replaceChildren(el("p", "This draft would not be saved:", {class: "errornote"}));
    const list = out.appendChild(el("ul", null, {class: "errorlist"}));
    Object.entries(errors).forEach(([field, messages]) => {
      [].concat(messages).forEach((m) => list.appendChild(el("li", `${field}: ${m}`)));
    });
  }
  async function run(panel) {
    const form = document.getElementById(panel.dataset.formId);
    const progress = panel.querySelector("#impact-progress");
    const status = panel.querySelector("#impact-status");
    const button = panel.querySelector("#impact-run");
    document.querySelectorAll("select.filtered[multiple]").forEach((box) => {
      if (box.id.endsWith("_to")) Array.from(box.options).forEach((o) => { o.selected = true; });
    });
    const data = new FormData(form);
    data.set("_object_type", panel.dataset.objectType);
    data.set("_object_id", panel.dataset.objectId);
    data.set("_days", panel.querySelector("#impact-days").value);
    button.disabled = true; progress.hidden = false; progress.removeAttribute("value"); status.textContent = "Replaying…";
    try {
      const response = await fetch(panel.dataset.url, {method: "POST", body: data, credentials: "same-origin",
        headers: {"X-CSRFToken": data.get("csrfmiddlewaretoken") || ""}});
      if (response.status === 429 || response.status === 503) {  // busy (Retry-After), or past the time budget
        const answer = await response.json();
        panel.querySelector("#impact-result").replaceChildren(el("p", answer.detail, {class: "errornote"}));
        status.textContent = ""; return;
      }
      if (!response.ok) { showErrors(panel, await response.json()); status.textContent = ""; return; }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffered = "";
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buffered += decoder.decode(value, {stream: true});
        let newline;
        while ((newline = buffered.indexOf("\n")) >= 0) {
          const line = JSON.parse(buffered.slice(0, newline)); buffered = buffered.slice(newline + 1);
          if (line.report) { showReport(panel, line.report); status.textContent = "Done."; progress.value = progress.max; }
          else if (line.error) { panel.querySelector("#impact-result").replaceChildren(el("p", line.error, {class: "errornote"})); status.textContent = ""; }
          else { progress.max = Math.max(line.of, 1); progress.value = line.progress; status.textContent = `${line.progress} of ${line.of}`; }
        }
      }
    } catch (error) {
      status.textContent = `The impact could not be computed: ${error}`;
    } finally {
      button.disabled = false;
    }
  }
  document.addEventListener("DOMContentLoaded", () => {
    const panel = document.getElementById("impact-panel");
    if (panel) panel.querySelector("#impact-run").addEventListener("click", () => run(panel));
  });
})();
