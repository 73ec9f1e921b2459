"""Catalog: GPUs, models and published references, searchable; add a GPU or a model (form,
config.json or a YAML import) for this session, validated exactly like the shipped YAML; save
them to the user catalog file (loaded for every session and by the CLI), export and import it.
See app/user_entries.py for what is shared between sessions and what is not."""

import datetime

import numpy as np
import pandas as pd
import streamlit as st

from app import common as c
from app import state
from app import user_entries as ue
from app.labels import CATALOG_TABS, md_escape

c.ensure_frame()
from catalog.schema import CatalogError
from catalog.user import model_from_config, parse_config
from engine.params import total_params

models, gpus = c.merged_frames()
refs = c.shipped("references")
u, div = c.unit()
ids = c.shipped_ids()
gpu_origin = ue.origins("gpus", ids["gpus"])
model_origin = ue.origins("models", ids["models"])
path = ue.catalog_path()

c.page_header("Catalog", "The GPUs, models and published figures behind every estimate, with their sources. Add a GPU "
              "or a model for this session: it is checked like the shipped catalog and every page uses it. "
              "Only you see it until you save it to your catalog file.")
flash = st.session_state.pop("catalog_flash", None)
if flash:
    st.success(flash)
for problem in ue.problems(ids):
    st.warning(md_escape(problem), icon="⚠️")
SHOWN_LINES = 200  # a list longer than this is cut (the file keeps every entry; the CLI names each)


def listed(lines: list[str]) -> str:
    shown_ = "\n".join(f"- {md_escape(line)}" for line in lines[:SHOWN_LINES])
    more = len(lines) - SHOWN_LINES
    return shown_ + (f"\n- … and {more:,} more" if more > 0 else "")


set_aside = ue.set_aside()
if set_aside:  # issue 24: one bad entry is set aside alone, named with the reason; the others load
    st.warning(f"{len(set_aside):,} {'entry' if len(set_aside) == 1 else 'entries'} of your catalog file "
               f"{ue.md_code(path)} could not be loaded and {'was' if len(set_aside) == 1 else 'were'} set aside. "
               "Every other entry loaded; the set-aside ones stay in the file as written (a save keeps them): "
               "fix the field named below in the file to get each back.\n\n" + listed(set_aside), icon="⚠️")
filled_in = ue.filled()
if filled_in:
    st.info(f"{len(filled_in):,} saved {'entry was' if len(filled_in) == 1 else 'entries were'} written by an older "
            "version and read with a field filled in (nothing a user would read as measured):\n\n" + listed(filled_in))
for kind, label in (("gpus", "GPU"), ("models", "model")):
    for ident in ue.shadowed(kind):
        st.info(f"Your catalog file also has a {label} {ue.md_code(ident)}: this session shows the one you added "
                "here (save or remove yours to see the saved one).")
# the search and the open tab are kept in the settings and the URL (app/state.py PAGE_FIELDS: catalog_search, catalog_tab)
query = state.control("catalog_search", lambda k, **v: st.text_input("Search all tables (id, name, vendor, source, …)",
                                                                    key=k, **v))


def search(frame: pd.DataFrame) -> pd.DataFrame:
    if not query:
        return frame
    hit = np.zeros(len(frame), dtype=bool)
    for col in frame.columns:  # column by column, each searched whole
        hit |= frame[col].astype(str).str.contains(query, case=False, regex=False).to_numpy()
    return frame[hit]


def added_message(label: str, record: dict) -> str:
    extra = f", {record['params']:,} parameters" if "params" in record else ""
    return (f"Added {label} {ue.md_code(record['name'])} ({ue.md_code(record['id'])}{extra}) to this session; every "
            "page now includes it. Only you see it: save it to your catalog file below to keep it.")


def add_entry(kind: str, label: str, raw: dict) -> None:
    """Validate what the user typed like the shipped YAML; add it to this session, or show one
    line naming the bad field (the form keeps what was typed)."""
    try:
        record = c.validate_user_entry(kind, raw)
    except CatalogError as exc:
        st.error(md_escape(exc))
    else:
        c.add_user_entry(kind, record)
        st.session_state["catalog_flash"] = added_message(label, record)
        st.rerun()


# keyed and tracked: the rerun after adding an entry stays on the tab the user was on (it used to
# jump back to the GPUs tab)
# (the open one is read back as its URL word, app/labels.py CATALOG_TABS)
drawn: dict = {}
state.control("catalog_tab", lambda k, index: drawn.setdefault("tabs", st.tabs(
    list(CATALOG_TABS.values()), key=k, on_change="rerun", default=list(CATALOG_TABS.values())[index])),
    read=lambda tabs: next((word for word, tab in zip(CATALOG_TABS, tabs) if tab.open), "gpus"))
tab_gpus, tab_models, tab_refs, tab_add_gpu, tab_add_model, tab_file, tab_run = drawn["tabs"]

with tab_gpus:
    view = pd.DataFrame({
        "id": gpus["id"], "Name": gpus["name"], "Vendor": gpus["vendor"], "Segment": gpus["segment"],
        "Memory (GB, vendor)": gpus["memory_gb"].astype(float),
        f"Usable ({u})": c.mem(gpus["usable_memory_bytes"]),
        "Memory type": gpus["memory_type"], "Unified memory": gpus["unified_memory"].astype(bool),
        "Bandwidth (GB/s)": gpus["bandwidth_gbps"].astype(float),
        "BF16 dense (TFLOPS)": gpus["bf16_tflops"].astype(float), "FP16 dense (TFLOPS)": gpus["fp16_tflops"].astype(float),
        "INT8 (TOPS)": gpus["int8_tops"].astype(float), "TDP (W)": gpus["tdp_w"].astype(float),
        "Interconnect": gpus["interconnect"], "Interconnect (GB/s)": gpus["interconnect_gbps"].astype(float),
        "Launch year": gpus["launch_year"].astype(int),
        "Price ($)": gpus["price_usd"].astype(float), "Price source": gpus["price_source"], "Price date": gpus["price_date"],
        "Cloud ($/GPU-h)": gpus["cloud_usd_per_hour"].astype(float), "Cloud source": gpus["cloud_source"],
        "Cloud date": gpus["cloud_date"],
        "Used price ($)": gpus["price_used_usd"].astype(float) if "price_used_usd" in gpus else np.nan,
        "Used price date": gpus.get("price_used_date"), "Used price source": gpus.get("price_used_source"),
        "Form factor": gpus.get("form_factor"), "Max per node": gpus.get("max_per_node"),
        "Within a node": gpus.get("node_interconnect"), "Host class": gpus.get("host_class"),
        "Architecture": gpus.get("architecture"), "System source": gpus.get("system_source"),
        "Usable memory source": gpus["usable_memory_source"],
        "Origin": gpus["id"].map(gpu_origin).fillna(ue.ORIGIN_SHIPPED),
    })
    shown = search(view)
    st.caption(f"{len(shown)} of {len(view)} GPUs. Prices are snapshots with their source and date.")
    c.table(shown, "catalog_gpus", c.csv_settings(page="catalog: GPUs", search=query),
            # (the cloud price as the catalog has it: $%.2f showed 2.125 as $2.13, its CSV 2.125)
            formats={"Price ($)": "dollar", "Used price ($)": "dollar", "Launch year": "%d"})

with tab_models:
    view = pd.DataFrame({
        "id": models["id"], "Name": models["name"], "Family": models["family"],
        "Parameters (billions)": np.round(models["params"].astype(float) / 1e9, 3),
        "Parameters (exact)": models["params"].astype("int64"),
        # issue 15: mixture of experts: what one token uses beside the total (= the total if dense)
        "Active per token (billions)": np.round(pd.to_numeric(models.get("active_params", models["params"]))
                                                .fillna(models["params"]).astype(float) / 1e9, 3),
        "Experts (per token)": [f"{int(e)} ({int(k)})" if e else "dense" for e, k in
                                zip(models.get("num_experts", pd.Series(0, index=models.index)).fillna(0),
                                    models.get("experts_per_token", pd.Series(0, index=models.index)).fillna(0))],
        "Attention": [("MLA latent" if r else "") + (f"{int(n)} layers window {int(w):,}" if w else "") or "full"
                      for r, n, w in zip(models.get("kv_lora_rank", pd.Series(0, index=models.index)).fillna(0),
                                         models.get("sliding_window_layers", pd.Series(0, index=models.index)).fillna(0),
                                         models.get("sliding_window", pd.Series(0, index=models.index)).fillna(0))],
        "Hidden": models["hidden_size"].astype(int), "FFN": models["intermediate_size"].astype(int),
        "Layers": models["num_layers"].astype(int), "Heads": models["num_heads"].astype(int),
        "KV heads": models["num_kv_heads"].astype(int), "Head dim": models["head_dim"].astype(int),
        "Vocabulary": models["vocab_size"].astype(int), "Context (tokens)": models["max_context"].astype(int),
        "Tied embeddings": models["tied_embeddings"].astype(bool), "Released": models["release_date"].fillna("unknown").astype(str),
        # the checkpoint whose stored bytes an inference row at its precision weighs (a file's headers,
        # or a catalog entry's published checkpoint: Llama 3.1 405B's fp8 is Meta's FBGEMM FP8)
        "Stored checkpoint": [f"{p}: {b / 1e9:,.1f} GB" if p and b == b and b else "" for p, b in
                              zip(models.get("stored_precision", pd.Series("", index=models.index)).fillna(""),
                                  pd.to_numeric(models.get("stored_weights_bytes", pd.Series(np.nan, index=models.index)),
                                                errors="coerce"))],
        "Source": models["source"], "Origin": models["id"].map(model_origin).fillna(ue.ORIGIN_SHIPPED),
    })
    shown = search(view)
    st.caption(f"{len(shown)} of {len(view)} models. Parameter counts are derived from the architecture and checked "
               "against the published ones.")
    c.table(shown, "catalog_models", c.csv_settings(page="catalog: models", search=query),
            formats={"Parameters (exact)": "%d", "Context (tokens)": "localized"})

with tab_refs:
    view = pd.DataFrame({
        "id": refs["id"], "Kind": refs["kind"], "Metric": refs["metric"], "Value": refs["value"].astype(float),
        "Unit": refs["unit"], "Per GPU": refs["per_gpu"].astype(bool), "Date": refs["date"],
        "Scenario": refs["scenario_json"], "Source": refs["source"], "URL": refs["url"], "Setup": refs["setup_note"],
        "Explanation": refs["explanation"].fillna(""),
    })
    shown = search(view)
    st.caption(f"{len(shown)} of {len(view)} references; the Evidence page sets each beside our estimate.")
    c.table(shown, "catalog_references", c.csv_settings(page="catalog: references", search=query),
            links=("URL",))  # (the value as the source gives it: %g cut 39,300.01 to 39300)

with tab_add_gpu:
    st.markdown("Every field is checked like `catalog/gpus.yaml`; empty optional fields stay unknown.")
    with st.form("add_gpu_form"):
        a1, a2, a3, a4 = st.columns(4)
        gid = a1.text_input("id (lowercase letters, digits, '.', '-')", key="ag_id", placeholder="my-gpu-48gb")
        gname = a2.text_input("Name", key="ag_name", placeholder="My GPU 48GB")
        vendor = a3.selectbox("Vendor", ["nvidia", "amd", "intel", "apple"], key="ag_vendor")
        segment = a4.selectbox("Segment", ["consumer", "workstation", "datacenter", "apple"], key="ag_segment")
        b1, b2, b3, b4 = st.columns(4)
        memory_gb = b1.number_input("Memory (GB, vendor figure)", min_value=0.0, value=48.0, key="ag_memory_gb")
        usable_mib = b2.number_input("Usable memory (MiB, as nvidia-smi shows)", min_value=0, value=49140, step=1,
                                     key="ag_usable_mib")
        memory_type = b3.text_input("Memory type", value="GDDR6", key="ag_memory_type")
        unified = b4.checkbox("Unified memory (Apple)", key="ag_unified")
        c1_, c2_, c3_, c4_ = st.columns(4)
        bandwidth = c1_.number_input("Bandwidth (GB/s)", min_value=0.0, value=960.0, key="ag_bandwidth")
        fp16 = c2_.number_input("FP16 dense (TFLOPS)", min_value=0.0, value=180.0, key="ag_fp16")
        bf16 = c3_.number_input("BF16 dense (TFLOPS, optional)", min_value=0.0, value=None, key="ag_bf16")
        fp32 = c4_.number_input("FP32 (TFLOPS, optional)", min_value=0.0, value=None, key="ag_fp32")
        d1, d2, d3, d4 = st.columns(4)
        int8 = d1.number_input("INT8 (TOPS, optional)", min_value=0.0, value=None, key="ag_int8")
        fp8 = d2.number_input("FP8 (TFLOPS, optional)", min_value=0.0, value=None, key="ag_fp8")
        tdp = d3.number_input("TDP (W)", min_value=0.0, value=300.0, key="ag_tdp")
        year = d4.number_input("Launch year", min_value=1990, max_value=2100, value=2024, step=1, key="ag_year")
        e1, e2, e3, e4 = st.columns(4)
        interconnect = e1.text_input("Interconnect", value="PCIe 4.0 x16", key="ag_interconnect")
        link = e2.number_input("Interconnect (GB/s)", min_value=0.0, value=64.0, key="ag_link")
        price = e3.number_input("Purchase price ($, optional)", min_value=0.0, value=None, key="ag_price")
        cloud = e4.number_input("Cloud ($/GPU-hour, optional)", min_value=0.0, value=None, key="ag_cloud")
        f1, f2, f3, f4 = st.columns(4)
        price_source = f1.text_input("Price source", value="user entry", key="ag_price_source")
        price_date = f2.text_input("Price date (YYYY-MM)", value=pd.Timestamp.today().strftime("%Y-%m"), key="ag_price_date")
        cloud_source = f3.text_input("Cloud price source", value="user entry", key="ag_cloud_source")
        cloud_date = f4.text_input("Cloud price date (YYYY-MM)", value=pd.Timestamp.today().strftime("%Y-%m"), key="ag_cloud_date")
        usable_source = st.text_input("Where the usable memory comes from", value="user entry", key="ag_usable_source")
        notes = st.text_input("Notes (optional)", key="ag_notes")
        submitted = st.form_submit_button("Add this GPU for the session", type="primary")
    if submitted:
        raw = {"id": gid.strip(), "name": gname.strip(), "vendor": vendor, "segment": segment, "memory_gb": memory_gb,
               "usable_memory_bytes": int(usable_mib) * 2**20, "usable_memory_source": usable_source,
               "memory_type": memory_type, "unified_memory": bool(unified), "bandwidth_gbps": bandwidth,
               "bf16_tflops": bf16, "fp16_tflops": fp16, "fp32_tflops": fp32, "int8_tops": int8, "fp8_tflops": fp8,
               "tdp_w": tdp, "interconnect": interconnect, "interconnect_gbps": link, "launch_year": int(year),
               "price_usd": price, "price_source": price_source, "price_date": price_date.strip(),
               "cloud_usd_per_hour": cloud, "cloud_source": cloud_source, "cloud_date": cloud_date.strip()}
        if notes.strip():
            raw["notes"] = notes.strip()
        add_entry("gpu", "GPU", raw)

with tab_add_model:
    up_col, form_col = st.columns(2)
    with up_col:
        st.markdown("**From a Hugging Face `config.json`** (Llama-style: llama, mistral)")
        upload = st.file_uploader("config.json", type=["json"], key="am_upload", max_upload_size=ue.MAX_CONFIG_UPLOAD_MB)
        upload_id = st.text_input("Model id (optional; default from the config)", key="am_upload_id")
        if st.button("Add the uploaded model", key="am_upload_add", disabled=upload is None):
            try:
                # size cap, UTF-8, JSON syntax and duplicate keys checked (catalog.user.parse_config)
                cfg = parse_config(upload.getvalue(), upload.name)
                record = model_from_config(cfg, upload.name, upload_id.strip() or None)
                if upload_id.strip() and not cfg.get("_name_or_path"):
                    record["name"] = upload_id.strip()  # no name in the config: show the id the user chose
                record = c.validate_user_entry("model", record)
            except CatalogError as exc:
                st.error(md_escape(exc))
            else:
                c.add_user_entry("model", record)
                st.session_state["catalog_flash"] = added_message("model", record)
                st.rerun()
    with form_col:
        st.markdown("**By hand** (the parameter count is derived from the architecture)")
        with st.form("add_model_form"):
            g1, g2, g3 = st.columns(3)
            mid = g1.text_input("id", key="am_id", placeholder="my-llama-7b")
            mname = g2.text_input("Name", key="am_name", placeholder="My Llama 7B")
            family = g3.text_input("Family", value="custom", key="am_family")
            h1, h2, h3, h4 = st.columns(4)
            hidden = h1.number_input("Hidden size", min_value=1, value=4096, step=1, key="am_hidden")
            ffn = h2.number_input("Intermediate (FFN) size", min_value=1, value=11008, step=1, key="am_ffn")
            layers = h3.number_input("Layers", min_value=1, value=32, step=1, key="am_layers")
            heads = h4.number_input("Attention heads", min_value=1, value=32, step=1, key="am_heads")
            i1, i2, i3, i4 = st.columns(4)
            kv = i1.number_input("KV heads", min_value=1, value=32, step=1, key="am_kv")
            head_dim = i2.number_input("Head dim (0 = hidden / heads)", min_value=0, value=0, step=1, key="am_head_dim")
            vocab = i3.number_input("Vocabulary", min_value=1, value=32000, step=1, key="am_vocab")
            context = i4.number_input("Context (tokens)", min_value=1, value=4096, step=1, key="am_context")
            j1, j2, j3 = st.columns(3)
            tied = j1.checkbox("Tied embeddings", key="am_tied")
            released = j2.date_input("Release date", value=datetime.date(2024, 1, 1), key="am_released")
            msource = j3.text_input("Source", value="user entry", key="am_source")
            add_model = st.form_submit_button("Add this model for the session", type="primary")
        if add_model:
            hd = int(head_dim) or (int(hidden) // int(heads))
            raw = {"id": mid.strip(), "name": mname.strip(), "family": family.strip(), "hidden_size": int(hidden),
                   "intermediate_size": int(ffn), "num_layers": int(layers), "num_heads": int(heads),
                   "num_kv_heads": int(kv), "head_dim": hd, "vocab_size": int(vocab), "max_context": int(context),
                   "tied_embeddings": bool(tied),
                   "params": total_params(int(hidden), int(ffn), int(layers), int(heads), int(kv), hd, int(vocab), bool(tied)),
                   "release_date": released.isoformat(), "source": msource}
            add_entry("model", "model", raw)

with tab_file:
    saved = ue.saved()
    st.markdown(f"Your catalog file is {ue.md_code(path)} (set `LLM_PLANNER_USER_CATALOG` to move it). The "
                "entries in it load at start for every session on this server and for the command line, beside the "
                "shipped catalog. Entries added on this page stay in this browser session until you press "
                "**Save to my catalog file**.")
    saved_entries = [("gpus", r) for r in saved["gpus"]] + [("models", r) for r in saved["models"]]
    if saved_entries:
        st.markdown("#### Saved in your catalog file")
        for kind, record in saved_entries:  # the user's own few entries
            r1, r2 = st.columns([3, 2])
            r1.text(f"{'GPU' if kind == 'gpus' else 'Model'}: {record['name']} ({record['id']})")
            if r2.button("Delete from my catalog file", key=f"delete_{kind}_{record['id']}",
                         help="Removes it from the file for every session (the file is rewritten atomically)."):
                try:
                    ue.delete_saved_entry(kind, record["id"], ids)
                except CatalogError as exc:
                    st.error(md_escape(exc))
                else:
                    st.session_state["catalog_flash"] = (f"Deleted {ue.md_code(record['name'])} "
                                                         f"({ue.md_code(record['id'])}) from {ue.md_code(path)}.")
                    st.rerun()
    else:
        st.caption("Nothing saved yet.")

    st.markdown("#### Export")
    session_count = len(ue.session_records("gpus")) + len(ue.session_records("models"))
    x1, x2 = st.columns(2)
    if saved_entries:
        x1.download_button("Download my catalog file (YAML)", data=ue.export_saved(), file_name="user_catalog.yaml",
                           mime="application/x-yaml", key="export_saved", on_click="ignore",
                           help="The saved entries, in the shape of catalog/gpus.yaml and models.yaml.")
    else:
        x1.caption("Your catalog file is empty.")
    if session_count:
        x2.download_button("Download this session's entries (YAML)", data=ue.export_session(),
                           file_name="session_entries.yaml", mime="application/x-yaml", key="export_session",
                           on_click="ignore", help="The entries added in this session and not saved.")
    else:
        x2.caption("No unsaved entries in this session.")

    st.markdown("#### Import")
    st.caption("A YAML file with `gpus:` and/or `models:` lists, as the export writes it. Every entry is checked like "
               "the shipped catalog; if one is wrong, nothing is imported.")
    yaml_upload = st.file_uploader("Catalog YAML", type=["yaml", "yml"], key="imp_upload",
                                   max_upload_size=ue.MAX_YAML_UPLOAD_MB)
    i1, i2 = st.columns(2)
    to_session = i1.button("Add them to this session", key="imp_session", disabled=yaml_upload is None)
    to_file = i2.button("Save them to my catalog file", key="imp_file", disabled=yaml_upload is None,
                        help="An entry replaces your saved entry with the same id.")
    if to_session or to_file:
        try:
            if to_session:
                taken = {"gpus": set(gpus["id"]), "models": set(models["id"])}
                result = ue.import_into_session(yaml_upload.getvalue(), yaml_upload.name, taken)
                where = "to this session"
            else:
                result = ue.import_into_file(yaml_upload.getvalue(), yaml_upload.name, ids)
                where = f"to {ue.md_code(path)}"
        except CatalogError as exc:
            st.error(md_escape(exc))
        else:
            names = [f"{len(result['gpus'])} GPU(s)", f"{len(result['models'])} model(s)"]
            st.session_state["catalog_flash"] = (f"Imported {' and '.join(names)} {where}: "
                                                 + ", ".join(ue.md_code(i) for i in result["gpus"] + result["models"]))
            st.rerun()

session = [("gpus", r) for r in ue.session_records("gpus")] + [("models", r) for r in ue.session_records("models")]
if session:
    st.markdown("#### Added this session (only you see these)")
    for kind, record in session:  # the user's own few entries
        r1, r2, r3 = st.columns([3, 2, 1])
        r1.text(f"{'GPU' if kind == 'gpus' else 'Model'}: {record['name']} ({record['id']})")
        if r2.button("Save to my catalog file", key=f"save_{kind}_{record['id']}", type="primary",
                     help=f"Write it to {ue.md_code(path)}: it then loads for every session on this server "
                          "and for the CLI."):
            try:
                stored = ue.save_session_entry(kind, record["id"], ids)
            except CatalogError as exc:
                st.error(md_escape(exc))
            else:
                st.session_state["catalog_flash"] = (f"Saved {ue.md_code(stored['name'])} ({ue.md_code(stored['id'])}) "
                                                     f"to {ue.md_code(path)}; it now loads at start for every "
                                                     "session and the CLI.")
                st.rerun()
        if r3.button("Remove", key=f"remove_{kind[:-1]}_{record['id']}"):
            c.remove_user_entry(kind, record["id"])
            st.rerun()


def page_words(message: str) -> str:
    """planner/ingest.py's messages name the command line's flags; here they are this form's fields."""
    return (message.replace("give --model ID", "give the catalog model id (the field beside the GPU)")
            .replace("not of --model ", "not of the catalog model id ").replace("leave --model out", "leave that field empty")
            .replace("the --gpu of the card it ran on", "the card it ran on in 'The GPU it ran on'")
            .replace("than --gpu has", "than the GPU chosen has")
            .replace("no recognizable run in this file", "no recognizable run in the pasted text"))  # (pasted, no file)


# ---- issue 26: a run's own log, pasted: measured beside our estimate; kept among your runs ----------------
with tab_run:
    from planner import ingest as ing

    st.markdown("Paste a vLLM or SGLang start-up log, a llama.cpp load log, a torchtune recipe log (its resolved config and "
                "step lines) or the one JSON line of the training snippet (with HF Trainer memory metrics or DeepSpeed "
                "`see_memory_usage` lines beside it; docs/ingest.md, `llm-planner ingest`): each figure the run printed is shown beside our estimate "
                "of the same scenario. Kept runs are listed on the Evidence page, marked as yours.")
    pasted = st.text_area("The log (or the JSON line)", key="run_log_text", height=180)
    g1, g2 = st.columns(2)
    run_gpu = g1.selectbox("The GPU it ran on", list(gpus["id"]), key="run_log_gpu",
                           index=list(gpus["id"]).index("rtx-4090") if "rtx-4090" in set(gpus["id"]) else 0)
    run_model = g2.text_input("Catalog model id (leave empty: matched from the log)", key="run_log_model")
    if st.button("Compare with the estimate", key="run_log_compare", type="primary"):
        try:
            st.session_state["run_log_result"] = ing.ingest_text(pasted, run_gpu, models, gpus,
                                                                 run_model.strip() or None)
        except ing.IngestError as exc:
            st.session_state.pop("run_log_result", None)
            st.error(md_escape(page_words(str(exc))))
    result = st.session_state.get("run_log_result")
    if result is not None:
        st.caption(md_escape(f"{result['format']} run of {result['model']} (read: {result['model_read']}) on "
                             f"{result['gpu']}"))
        c.table(pd.DataFrame([{"Figure": f["figure"], "Measured": ing._shown(f["measured"], f["unit"]),
                               "Ours": ing._shown(f["estimate"], f["unit"]),
                               "Error (%)": f["error_pct"] if f["error_pct"] is not None else np.nan,
                               "Counter": f["counter"]} for f in result["figures"]]),
                "run_log_figures", c.csv_settings(page="catalog: your run's log", gpu=result["gpu"]),
                formats={"Error (%)": "%+.1f"})
        for note in result.get("notes", []):  # what the comparison rests on (ingest's "note:" lines)
            st.caption("Note: " + md_escape(note))
        if st.button("Keep it among my runs", key="run_log_save",
                     help=f"Written to {ue.md_code(str(ing.user_runs_path()))}; the Evidence page lists it."):
            try:
                before = ing.saved_before(result)
                saved = ing.save_run(result)
            except (ing.IngestError, OSError) as exc:
                st.error(md_escape(str(exc)))
            else:
                if before:
                    st.info(f"Already kept as {ue.md_code(saved)}: the same run, not added again.")
                else:
                    st.success(f"Kept as {ue.md_code(saved)}: the Evidence page lists it, marked as yours.")
