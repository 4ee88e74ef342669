"""The block drafter's worker SGLang instantiates (this module imports SGLang). PROTOTYPE."""

from __future__ import annotations

import importlib
from http import HTTPStatus
from typing import Optional

from sglang.srt.managers.schedule_batch import FINISH_ABORT
from sglang.srt.managers.utils import GenerationBatchResult
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
from sglang.srt.speculative.dflash_info import DFlashVerifyInput
from sglang.srt.speculative.ngram_info import NgramVerifyInput
import torch

from sglang_spec_plugins.engine.draft_worker import draft_model_worker_base, forward_target
from sglang_spec_plugins.engine.algorithm import policy_for
from sglang_spec_plugins.patches.backend_support import configured_ndt

from .plugin import ALGORITHM


def _sglang(name, *modules):
    for module in modules:
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if found is not None:
            return found
    raise ImportError(f"{name} not found in {modules}")


accept_greedy = _sglang("compute_dflash_correct_drafts_and_bonus", "sglang.kernels.ops.speculative.dflash",
                        "sglang.srt.speculative.dflash_utils")
parse_draft_config = _sglang("parse_dflash_draft_config", "sglang.srt.speculative.dflash_utils")


def unsupported(req) -> Optional[str]:
    params = req.sampling_params
    reasons = [
        (params.top_k > 1 and params.temperature > 0, "sampling with temperature > 0 (use temperature 0)"),
        (params.frequency_penalty or params.presence_penalty or params.repetition_penalty != 1.0, "penalties"),
        (bool(getattr(params, "logit_bias", None)), "logit_bias"),
        (params.min_new_tokens > 0, "min_new_tokens"),
        (bool(getattr(req, "custom_logit_processor", None)), "a custom logit processor"),
        (req.return_logprob, "return_logprob"),
        (getattr(req, "grammar", None) is not None, "grammar-constrained decoding"),
    ]
    found = [why for hit, why in reasons if hit]
    return f"{ALGORITHM} speculative decoding serves greedy requests only; this one asks for {', '.join(found)}" \
        if found else None


class DFlashBlockWorker(draft_model_worker_base()):
    def __init__(self, server_args, target_worker, **release_kwargs):
        super().__init__(server_args, target_worker, **release_kwargs)
        policy = policy_for(server_args)
        ndt = configured_ndt(target_worker.model_runner)
        self.block_size = policy.width(ndt, True)
        self.verify_width = policy.width(ndt, False)
        draft_config = parse_draft_config(draft_hf_config=self.draft_runner.model_config.hf_config)
        self.mask_token_id = int(draft_config.mask_token_id)
        self.draft_model = self.draft_runner.model
        target = target_worker.model_runner.model
        self.embed = target.get_input_embeddings()
        self.lm_head = target.lm_head
        self._fused = self._fused_kv_helper()
        self._block_spec_info = DFlashVerifyInput(
            draft_token=torch.empty((0,), dtype=torch.long, device=self.device),
            positions=torch.empty((0,), dtype=torch.int64, device=self.device),
            draft_token_num=self.block_size, custom_mask=None, capture_hidden_mode=CaptureHiddenMode.NULL)

    @property
    def device(self):
        return self.target_worker.model_runner.device

    def _fused_kv_helper(self):
        helper = _sglang("FusedKVMaterializeHelper", "sglang.kernels.ops.speculative.fused_kv_materialize",
                         "sglang.srt.speculative.triton_ops.fused_kv_materialize")
        can_fuse = _sglang("can_dflash_use_fused_qkv_proj", "sglang.srt.speculative.dflash_utils")
        layers = self.draft_model.layers
        if not layers or not getattr(self.draft_model, "supports_fused_context_kv", True):
            return None
        for layer in layers:
            attn = layer.self_attn
            if not can_fuse(attn.qkv_proj)[0] or not getattr(attn.rotary_emb, "is_neox_style", True):
                return None
            for scale in (getattr(attn.attn, "k_scale", None), getattr(attn.attn, "v_scale", None)):
                if scale is not None and float(scale) != 1.0:
                    return None
        first = layers[0].self_attn
        return helper(layers=layers, rotary_emb=first.rotary_emb, num_kv_heads=first.num_kv_heads,
                      head_dim=first.head_dim, device=self.device,
                      max_position_hint=self.target_worker.model_runner.model_config.context_len + self.block_size)

    # -- the step ------------------------------------------------------------

    def forward_batch_generation(self, batch, **kwargs):
        if batch.forward_mode.is_idle():
            return self._idle()
        if batch.forward_mode.is_extend() or getattr(batch, "is_extend_in_batch", False):
            return self._prefill(batch)
        return self._decode(batch)

    def _result(self, logits_output, rows, accept_lens, new_seq_lens, can_run_cuda_graph):
        stride = self.verify_width
        carried = NgramVerifyInput(draft_token_num=stride, new_seq_lens=new_seq_lens,
                                   accept_tokens=rows.flatten(), accept_lens=accept_lens)
        return GenerationBatchResult(
            logits_output=logits_output, next_token_ids=rows.flatten(), accept_lens=accept_lens,
            new_seq_lens=new_seq_lens, next_draft_input=carried, can_run_cuda_graph=can_run_cuda_graph,
            speculative_num_draft_tokens=rows.shape[1])

    def _idle(self):
        tokens = torch.empty((0, self.verify_width), dtype=torch.int64, device=self.device)
        lens = torch.empty((0,), dtype=torch.int64, device=self.device)
        return self._result(None, tokens, lens.to(torch.int32), lens, False)

    def _prefill(self, batch):
        for req in batch.reqs:
            why = unsupported(req)
            if why is not None and req.to_finish is None:
                req.to_finish = FINISH_ABORT(why, HTTPStatus.BAD_REQUEST, "BadRequestError")
        out = forward_target(self.target_worker, batch, CaptureHiddenMode.FULL)
        hidden = out.logits_output.hidden_states
        device = self.device
        prefix = torch.tensor(batch.prefix_lens, dtype=torch.int64, device=device)
        extend = torch.tensor(batch.extend_lens, dtype=torch.int64, device=device)
        positions = torch.cat([torch.arange(p, p + e, device=device) for p, e in zip(prefix.tolist(), extend.tolist())])
        self._write_context_kv(hidden, batch.out_cache_loc.to(torch.int64), positions)
        out.logits_output.hidden_states = None
        first = out.next_token_ids
        accept_lens = torch.ones(len(batch.reqs), dtype=torch.int32, device=device)
        return self._result(out.logits_output, first.unsqueeze(1), accept_lens, batch.seq_lens.clone(),
                            out.can_run_cuda_graph)

    def _write_context_kv(self, target_hidden, cache_loc, positions):
        """Draft KV for context tokens, projected from the target's captured hidden states."""
        if target_hidden is None or target_hidden.numel() == 0:
            return
        pool = self.draft_runner.token_to_kv_pool
        model = self.draft_model
        with torch.inference_mode():
            ctx = model.project_target_hidden(target_hidden)
            if self._fused is not None:
                def write(i, k, v):
                    attn = model.layers[i].self_attn.attn
                    pool.set_kv_buffer(attn, cache_loc, k, v, attn.k_scale, attn.v_scale)

                self._fused.materialize(ctx_hidden=ctx, positions=positions, write_layer_kv=write)
                return
            prepare = getattr(model, "prepare_context_hidden_for_kv", None)
            for layer in model.layers:
                attn = layer.self_attn
                hidden = prepare(layer, ctx) if prepare is not None else ctx
                k, v = attn.kv_proj_only(hidden)
                k = attn.apply_k_rope(positions, attn.apply_k_norm(k))
                pool.set_kv_buffer(attn.attn, cache_loc, k.view(-1, attn.num_kv_heads, attn.head_dim),
                                   v.view(-1, attn.num_kv_heads, attn.head_dim), attn.attn.k_scale, attn.attn.v_scale)

    def _decode(self, batch):
        device = self.device
        bs, block, width = len(batch.reqs), self.block_size, self.verify_width
        bonus = torch.tensor([req.output_ids[-1] for req in batch.reqs], dtype=torch.int64).to(device)
        prefix = batch.seq_lens.to(torch.int64)
        positions = prefix.unsqueeze(1) + torch.arange(block, device=device, dtype=torch.int64)
        slots = batch.req_to_token_pool.req_to_token[batch.req_pool_indices.to(torch.int64).unsqueeze(1), positions]
        slots = slots.to(torch.int64)
        block_ids = torch.full((bs, block), self.mask_token_id, dtype=torch.int64, device=device)
        block_ids[:, 0] = bonus
        drafts = self._draft(batch, block_ids, positions, slots)
        chain = torch.cat([bonus.unsqueeze(1), drafts[:, : width - 1]], dim=1)
        batch.out_cache_loc = slots[:, :width].flatten()
        batch.input_ids = chain.flatten()
        batch.forward_mode = ForwardMode.TARGET_VERIFY
        batch.spec_info = DFlashVerifyInput(
            draft_token=batch.input_ids, positions=positions[:, :width].flatten(), draft_token_num=width,
            custom_mask=None, capture_hidden_mode=CaptureHiddenMode.FULL)
        out = forward_target(self.target_worker, batch, is_verify=True)
        logits = out.logits_output
        predicted = torch.argmax(logits.next_token_logits, dim=-1).view(bs, width)
        accepted, _ = accept_greedy(candidates=chain, target_predict=predicted)
        commit = (accepted + 1).to(torch.int32)
        hidden = logits.hidden_states.view(bs, width, -1)
        keep = torch.arange(width, device=device).unsqueeze(0) < commit.unsqueeze(1)
        self._write_context_kv(hidden[keep], slots[:, :width][keep], positions[:, :width][keep])
        logits.hidden_states = None
        batch.forward_mode = ForwardMode.DECODE
        return self._result(logits, predicted, commit, batch.seq_lens + commit.to(batch.seq_lens.dtype),
                            out.can_run_cuda_graph)

    def _draft(self, batch, block_ids, positions, slots):
        """``block - 1`` drafts per request from one TARGET_VERIFY forward of the draft model."""
        bs, block = block_ids.shape
        embeds = self.embed(block_ids).view(bs * block, -1)
        seq_lens_cpu = batch.seq_lens_cpu if getattr(batch, "seq_lens_cpu", None) is not None \
            else batch.seq_lens.cpu()
        forward_batch = ForwardBatch(
            forward_mode=ForwardMode.TARGET_VERIFY, batch_size=bs, input_ids=block_ids.flatten(),
            req_pool_indices=batch.req_pool_indices, seq_lens=batch.seq_lens, out_cache_loc=slots.flatten(),
            seq_lens_sum=int(seq_lens_cpu.sum()), seq_lens_cpu=seq_lens_cpu.to(torch.int32),
            positions=positions.flatten(), input_embeds=embeds, spec_algorithm=self.draft_runner.spec_algorithm,
            spec_info=self._block_spec_info, capture_hidden_mode=CaptureHiddenMode.NULL)
        with torch.inference_mode():
            out = self.draft_runner.forward(forward_batch)
        hidden = out.logits_output.hidden_states.view(bs, block, -1)[:, 1:, :].reshape(-1, self.embed.weight.shape[1])
        self._last_hidden = hidden
        weight = self.lm_head.weight
        num_org = getattr(getattr(self.lm_head, "shard_indices", None), "num_org_elements", weight.shape[0])
        logits = torch.matmul(hidden.to(weight.dtype), weight[:num_org].T)
        return torch.max(logits, dim=-1)[1].view(bs, block - 1)
