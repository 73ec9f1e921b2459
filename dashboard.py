"""LLM hardware planner: the Streamlit entry point (minimal: the catalog and one estimate)."""

import pandas as pd
import streamlit as st

from catalog import default_catalog
from engine import estimate

st.set_page_config(page_title="LLM hardware planner", page_icon="🧮", layout="wide")


@st.cache_resource
def catalog():
    return default_catalog()


cat = catalog()
gpus, models = cat.gpus(), cat.models()

st.title("LLM hardware planner")
st.caption("Memory per GPU for training and serving Llama-family models; GiB = 2^30 bytes.")

scenario = pd.DataFrame([{"model": "llama-3-8b", "task": "train", "method": "lora", "precision": "bf16",
                          "batch": 1, "seq": 2048, "gpu": "rtx-4090"}])
row = estimate(scenario, models, gpus).iloc[0]
st.metric("Llama 3 8B LoRA (r=8, q/v), bf16, batch 1, seq 2048: peak per GPU",
          f"{row['peak_bytes'] / 2**30:.1f} GiB",
          help="Weights, adapters, optimizer states, saved activations, logits and runtime overhead.")
st.write(f"On an RTX 4090 ({row['usable_bytes'] / 2**30:.1f} GiB usable): "
         + ("fits." if bool(row["fits"]) else "does not fit."))

st.subheader("GPUs")
st.dataframe(gpus, width="stretch", hide_index=True)
st.subheader("Models")
st.dataframe(models, width="stretch", hide_index=True)
