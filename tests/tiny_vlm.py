"""A tiny, randomly initialised SmolVLM (Idefics3) model and processor, built fully offline for tests.

Vision: 32x32 images, 8x8 patches, 1 layer of width 32; pixel shuffle (scale 2) leaves 4 image tokens per
image. Text: a 2-layer Llama of width 64 with a byte-level BPE tokenizer trained on a few sentences.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    Idefics3Config,
    Idefics3ForConditionalGeneration,
    Idefics3ImageProcessorPil,
    Idefics3Processor,
    PreTrainedTokenizerFast,
)

IMAGE = 32
PATCH = 8
SCALE = 2
SPECIAL = ["<pad>", "<unk>", "<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>", "<image>"]
SPECIAL += ["<global-img>"]

# SmolVLM's chat template, shortened: "User:<image>...text<end_of_utterance>\nAssistant:".
CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{ message['role'] | capitalize }}: "
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{ line['text'] }}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n"
    "{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

CORPUS = [
    "Task: pick up the cube. The first image is earlier, the second later.",
    "How much closer to completing the task is the second image? User: Assistant:",
    "open the top drawer push the red button stack the blue block",
]


def _tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        unk_token="<unk>",
        bos_token="<|im_start|>",
        eos_token="<end_of_utterance>",
        extra_special_tokens={"image_token": "<image>"},
    )


# SmolVLM-256M-Instruct's architecture (its config.json): SigLIP-B/16 at 512 px, pixel shuffle 4 (64 image
# tokens), SmolLM2-135M-style Llama (30 layers of width 576, 9 heads, 3 KV heads, vocabulary 49280).
SMOLVLM_256M = {
    "image": 512,
    "patch": 16,
    "scale": 4,
    "vision": {
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
    },
    "text": {
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "vocab_size": 49280,
        "max_position_embeddings": 8192,
    },
}
# SmolVLM-500M-Instruct's architecture (its config.json): the same SigLIP-B/16 at 512 px and pixel shuffle, a
# SmolLM2-360M-style Llama (32 layers of width 960, 15 heads, 5 KV heads).
SMOLVLM_500M = SMOLVLM_256M | {
    "text": SMOLVLM_256M["text"]
    | {"hidden_size": 960, "intermediate_size": 2560, "num_hidden_layers": 32, "num_attention_heads": 15}
    | {"num_key_value_heads": 5},
}
TINY = {
    "image": IMAGE,
    "patch": PATCH,
    "scale": SCALE,
    "vision": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4},
    "text": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "max_position_embeddings": 512,
    },
}


def build_tiny_vlm(path: str | Path, seed: int = 0) -> Path:
    """Save the :data:`TINY` Idefics3 model + processor under ``path`` (loadable with the Auto classes,
    offline)."""
    path = Path(path)
    model, processor = random_idefics3(TINY, seed)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


def random_idefics3(sizes: dict, seed: int = 0) -> tuple[Idefics3ForConditionalGeneration, Idefics3Processor]:
    """A randomly initialised Idefics3 model and its processor of ``sizes`` (:data:`TINY`, or
    :data:`SMOLVLM_256M` / :data:`SMOLVLM_500M` for benchmarks). The tokenizer is always the tiny one (its
    ids fit any larger vocabulary)."""
    image, patch, scale = sizes["image"], sizes["patch"], sizes["scale"]
    tokenizer = _tokenizer()
    image_processor = Idefics3ImageProcessorPil(
        do_image_splitting=False,
        size={"longest_edge": image},
        max_image_size={"longest_edge": image},
    )
    processor = Idefics3Processor(
        image_processor,
        tokenizer,
        image_seq_len=(image // patch) ** 2 // scale**2,
        chat_template=CHAT_TEMPLATE,
    )
    vision = sizes["vision"] | {"image_size": image, "patch_size": patch}
    text = {"model_type": "llama", "vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id}
    config = Idefics3Config(
        vision_config=vision,
        text_config=text | sizes["text"],
        scale_factor=scale,
        image_token_id=tokenizer.convert_tokens_to_ids("<image>"),
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    return Idefics3ForConditionalGeneration(config), processor


def build_tiny_paligemma(path: str | Path, seed: int = 0) -> Path:
    """Save a tiny PaliGemma (SigLIP vision: 32x32 images, 8x8 patches -> 16 image tokens; a 2-layer Gemma
    of width 64) + processor under ``path``, loadable offline with the Auto classes."""
    from transformers import (
        PaliGemmaConfig,
        PaliGemmaForConditionalGeneration,
        PaliGemmaProcessor,
        SiglipImageProcessorPil,
    )

    path = Path(path)
    tokenizer = _tokenizer()
    tokens = (IMAGE // PATCH) ** 2
    image_processor = SiglipImageProcessorPil(size={"height": IMAGE, "width": IMAGE})
    image_processor.image_seq_length = tokens
    processor = PaliGemmaProcessor(image_processor=image_processor, tokenizer=tokenizer)
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4}
    vision |= {"image_size": IMAGE, "patch_size": PATCH, "projection_dim": 64}
    text = {"model_type": "gemma", "vocab_size": len(tokenizer), "hidden_size": 64, "intermediate_size": 128}
    text |= {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16}
    config = PaliGemmaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        projection_dim=64,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    PaliGemmaForConditionalGeneration(config).save_pretrained(path)
    processor.save_pretrained(path)
    return path
