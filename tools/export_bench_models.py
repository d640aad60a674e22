#!/usr/bin/env python3
"""Medium-size models for the executor benchmark (issue 27), exported the way users do.

The checked-in fixtures (examples/onnx) are tiny (hidden 64, 8 tokens) so that tests stay
fast; a run of them takes tens of microseconds and measures per-kernel overheads. These are
larger, so that GEMM, convolution and thread scaling dominate:

- gpt2_h256: GPT-2, hidden 256, 4 layers, 4 heads, 128 tokens, batch 1 (TorchScript, SDPA)
- bert_h256: BERT, hidden 256, 4 layers, 128 tokens, batch 1 (TorchScript, SDPA)
- llama_h256: Llama, hidden 256, 4 layers, GQA 8/2 heads, 128 tokens (TorchScript, SDPA)
- vit_h192: ViT, hidden 192, 4 layers, 224x224 image, patch 16 (197 tokens)
- resnet_56: a ResNet-style CNN on 1x3x112x112 (64 and 128 channels, 3x3 and 1x1 convs)
- mobilenet_v2_224, efficientnet_b0_224, convnext_s_224: depthwise convolutions at their real
  size, 1x3x224x224 (BatchNorm statistics randomized)

Random weights (seeded); each directory gets model.onnx and inputs/*.npy. Nothing here is
checked in: the files are tens of MB. Usage:
    python tools/export_bench_models.py /tmp/benchmodels
Needs tools/real_onnx_requirements.txt (torch, transformers, onnx, onnxruntime).
"""
import os
import sys

import numpy as np
import torch
import transformers

SEQ = 128


class Wrap(torch.nn.Module):
    def __init__(self, m, names):
        super().__init__()
        self.m = m
        self.names = names

    def forward(self, *args):
        if isinstance(self.m, torch.nn.Sequential):
            return self.m(*args)
        out = self.m(**dict(zip(self.names, args)))
        return out[0] if isinstance(out, (tuple, list)) else (
            out.logits if hasattr(out, "logits") else out.last_hidden_state)


def text(cfg_cls, model_cls, tt=False, **kw):
    def make():
        torch.manual_seed(0)
        cfg = cfg_cls(**kw)
        cfg._attn_implementation = "sdpa"
        m = model_cls(cfg).eval()
        ids = torch.randint(0, kw["vocab_size"], (1, SEQ))
        mask = torch.ones(1, SEQ, dtype=torch.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if tt:
            feeds["token_type_ids"] = torch.zeros(1, SEQ, dtype=torch.int64)
        return m, feeds
    return make


def vit():
    torch.manual_seed(0)
    cfg = transformers.ViTConfig(image_size=224, patch_size=16, num_channels=3, hidden_size=192,
                                 num_hidden_layers=4, num_attention_heads=3, intermediate_size=768)
    cfg._attn_implementation = "sdpa"
    return transformers.ViTModel(cfg).eval(), {"pixel_values": torch.randn(1, 3, 224, 224)}


class Block(torch.nn.Module):
    def __init__(self, c, stride):
        super().__init__()
        self.a = torch.nn.Conv2d(c // stride, c, 3, stride, 1)
        self.b = torch.nn.Conv2d(c, c, 3, 1, 1)
        self.skip = torch.nn.Conv2d(c // stride, c, 1, stride) if stride > 1 else torch.nn.Identity()

    def forward(self, x):
        return torch.relu(self.b(torch.relu(self.a(x))) + self.skip(x))


def resnet():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 7, 2, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1),
                            Block(64, 1), Block(64, 1), Block(128, 2), Block(128, 1),
                            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(128, 10)).eval()
    return m, {"pixel_values": torch.randn(1, 3, 112, 112)}


def vision(cfg_cls, model_cls, **kw):
    def make():
        torch.manual_seed(0)
        m = model_cls(cfg_cls(**kw)).eval()
        # BatchNorm statistics off their identity initialization (EfficientNet's fresh
        # network otherwise outputs zeros).
        g = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for mod in m.modules():
                if isinstance(mod, torch.nn.BatchNorm2d):
                    mod.weight.copy_(1 + 0.1 * torch.randn(mod.weight.shape, generator=g))
                    mod.bias.copy_(0.1 * torch.randn(mod.bias.shape, generator=g))
                    mod.running_mean.copy_(0.1 * torch.randn(mod.running_mean.shape, generator=g))
                    mod.running_var.copy_(1 + 0.1 * torch.rand(mod.running_var.shape, generator=g))
        return m, {"pixel_values": torch.randn(1, 3, 224, 224)}
    return make


MODELS = {
    "gpt2_h256": text(transformers.GPT2Config, transformers.GPT2LMHeadModel, vocab_size=2048, n_embd=256,
                      n_layer=4, n_head=4, n_positions=256),
    "bert_h256": text(transformers.BertConfig, transformers.BertModel, True, vocab_size=2048, hidden_size=256,
                      num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
    "llama_h256": text(transformers.LlamaConfig, transformers.LlamaForCausalLM, vocab_size=2048, hidden_size=256,
                       intermediate_size=688, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                       max_position_embeddings=256),
    "vit_h192": vit,
    "resnet_56": resnet,
    # Depthwise convolutions at their real size (added 2026-12-06): MobileNetV2 (width 1.0),
    # EfficientNet-B0, a small ConvNeXt (7x7 depthwise, channels-last LayerNorm).
    "mobilenet_v2_224": vision(transformers.MobileNetV2Config, transformers.MobileNetV2Model,
                               image_size=224),
    "efficientnet_b0_224": vision(transformers.EfficientNetConfig, transformers.EfficientNetModel,
                                  image_size=224, width_coefficient=1.0, depth_coefficient=1.0,
                                  hidden_dim=1280),
    "convnext_s_224": vision(transformers.ConvNextConfig, transformers.ConvNextModel,
                             hidden_sizes=[48, 96, 192, 384], depths=[1, 1, 3, 1], image_size=224),
}


def main():
    out = sys.argv[1]
    only = sys.argv[2:]
    for name, make in MODELS.items():
        if only and name not in only:
            continue
        m, feeds = make()
        d = os.path.join(out, name)
        os.makedirs(os.path.join(d, "inputs"), exist_ok=True)
        names = list(feeds)
        with torch.no_grad():
            torch.onnx.export(Wrap(m, names), tuple(feeds.values()), os.path.join(d, "model.onnx"),
                              input_names=names, output_names=["output"], opset_version=17, dynamo=False)
        for k, v in feeds.items():
            np.save(os.path.join(d, "inputs", f"{k}.npy"), v.numpy())
        print(name, os.path.getsize(os.path.join(d, "model.onnx")) // 1024, "KiB", flush=True)


if __name__ == "__main__":
    main()
