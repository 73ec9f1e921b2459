"""Parameter counts derived from the architecture equal the published ones exactly."""

import pytest

from engine.params import total_params

# Published counts (Hugging Face model cards / safetensors metadata), independent of our code.
PUBLISHED = {
    "llama-1-7b": 6_738_415_616,
    "llama-1-13b": 13_015_864_320,
    "llama-1-33b": 32_528_943_616,
    "llama-1-65b": 65_285_660_672,
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "llama-3-8b": 8_030_261_248,
    "llama-3-70b": 70_553_706_496,
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-70b": 70_553_706_496,
    "llama-3.1-405b": 405_853_388_800,
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.2-3b": 3_212_749_824,
}


@pytest.mark.parametrize("model_id", sorted(PUBLISHED))
def test_derived_parameter_count_equals_published(models, model_id):
    row = models.set_index("id").loc[model_id]
    derived = total_params(row.hidden_size, row.intermediate_size, row.num_layers, row.num_heads,
                           row.num_kv_heads, row.head_dim, row.vocab_size, row.tied_embeddings)
    assert derived == PUBLISHED[model_id]
    assert row.params == PUBLISHED[model_id]


def test_every_published_model_is_in_the_catalog(models):
    assert set(PUBLISHED) <= set(models["id"])


def test_tied_embeddings_count_the_matrix_once():
    # Llama 3.2 1B: untying would add vocab x hidden = 128256 x 2048 parameters.
    tied = total_params(2048, 8192, 16, 32, 8, 64, 128256, True)
    untied = total_params(2048, 8192, 16, 32, 8, 64, 128256, False)
    assert untied - tied == 128256 * 2048
