"""The whole step of a DFLASH-style block drafter with its own draft model:
:func:`draft_block_worker_base` and its plugin's argument check :func:`require_block_args`."""

from __future__ import annotations

import functools
from typing import Any, List, Optional

from ..engine.algorithm import policy_for
from ..engine.chain_verify import ChainVerifier
from ..engine.containment import FAULT, Containment, allowed_sync, sync_check
from ..engine.draft_worker import draft_model_worker_base, sglang_name
from ..engine.facts import overlap_scheduled, steps_in_flight
from ..engine.request_kinds import refusal, refuse_unservable
from ..engine.request_rules import needs_host_tokens
from ..engine.step_output import cache_locations, idle_result, step_result, verify_positions
from ..engine.step_relay import StepRelay
from ..engine.step_times import timer_for
from ..engine.worker_contract import contract
from .step_widths import StepWidths


def require_block_args(algorithm: str, server_args: Any) -> None:
    """A block drafter's argument check, for its plugin's ``validate_server_args``:
    ValueError naming ``algorithm`` unless ``--tp-size`` is 1 (:func:`draft_block_worker_base`
    drafts with the target's LM head on one rank: no vocabulary gather across TP ranks)."""
    tp_size = getattr(server_args, "tp_size", 1) or 1
    if tp_size != 1:
        raise ValueError(f"{algorithm} drafts with the target's LM head on one GPU: serve it with --tp-size 1, "
                         f"not {tp_size}")


@functools.lru_cache(maxsize=None)
def draft_block_worker_base() -> type:
    """A base class for a DFLASH-style block drafter's worker (imports SGLang; SGLang 0.5.14+).

    It is :func:`draft_model_worker_base` (a DFlash-layout draft checkpoint, the
    plugin declaring ``DraftModel()``) with the whole step, for every request
    kind the release serves (as :func:`~.chain_step.chain_worker_base`), under
    SGLang's overlap scheduler or without it. State between steps is SGLang's:
    the draft KV pool holds, for every token whose KV the target has written
    (``batch.seq_lens`` of them), the draft's K/V projected from the target's
    captured hidden states of it; the request's last token (the root) is in
    neither KV, and is read on the device from what the step before committed
    (:class:`~sglang_spec_plugins.engine.step_relay.StepRelay`). A decode step,
    for a block of ``B`` tokens (the draft runner's width, ``self.block``) and a
    verify width ``W <= B`` (the target's, ``self.width``):

    1. the block ``[root, mask x (B - 1)]`` at positions ``seq_len .. seq_len + B - 1``
       goes through the draft model in one TARGET_VERIFY forward on the draft
       runner (``input_embeds``: the target's embedding of the block; the draft
       attends non-causally within the block and to the context's draft KV, and
       writes the block's K/V into the slots the scheduler reserved);
    2. ``drafts(batch, hidden)`` turns the draft's hidden states at the block's
       positions 1.. ``(bs, B - 1, hidden_size)`` into ``B - 1`` drafts per request
       (by default :meth:`greedy_drafts`: the target's LM head, greedy, as DFLASH),
       or into ``(drafts, probs)``: drafts drawn from a proposal ``probs``
       ``(bs, B - 1, vocab)``, which verification then takes into account;
    3. the target verifies ``[root, d_1 .. d_{W-1}]`` causally in its own
       TARGET_VERIFY (the block's first ``W`` slots), capturing every token's hidden states;
    4. :class:`~sglang_spec_plugins.engine.chain_verify.ChainVerifier` commits
       ``c`` tokens, ``1 <= c <= W`` (greedy requests as plain greedy decoding,
       sampled ones as plain sampling, penalties, grammars, logprobs as plain
       decoding's); the hidden states of all ``W`` verified tokens are projected
       into the draft KV at their slots, as DFLASH writes its whole verified block
       (the slots past ``seq_len + c`` keep K/V no step reads).

    Nothing the step computes is read back to the host in that step, except a
    grammar request's chain (its grammar judges the drafts on the host). A
    request with penalties or a grammar needs its output tokens on the host:
    under overlap the last step's are read back (once) in the step after it.

    The prefill is the target's own (it samples the first token), capturing
    the hidden states that become the prompt's draft KV; requests ``refusal(req)``
    names are refused there one by one. A ``drafts`` that raises or returns
    the wrong shape, type or token range is the drafter's fault, contained as
    the chain base contains it (its drafts become the root repeated). At
    ``W = B`` it drafts and verifies token for token as SGLang's own DFLASH.

    ``B`` and ``W`` are one width each, at every step (``verifies_one_width``):
    widths by batch size that give a worker several widths are refused by the
    start-up check and by ``check``, naming where they come from."""
    # SGLang first: where it is missing, the ImportError names it (the kit then skips SGLang's checks)
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
    from sglang.srt.speculative.dflash_info import DFlashVerifyInput
    import torch

    parse_draft_config = sglang_name("parse_dflash_draft_config", "sglang.srt.speculative.dflash_utils")
    fused_kv_helper = sglang_name("FusedKVMaterializeHelper", "sglang.kernels.ops.speculative.fused_kv_materialize",
                                  "sglang.srt.speculative.triton_ops.fused_kv_materialize")
    can_fuse_qkv = sglang_name("can_dflash_use_fused_qkv_proj", "sglang.srt.speculative.dflash_utils")

    class DraftBlockSpecWorker(draft_model_worker_base()):
        verifies_one_width = True  # B and W, the largest widths of each worker (widths by batch size are refused)

        def __init__(self, server_args, target_worker, **release_kwargs):
            super().__init__(server_args, target_worker, **release_kwargs)
            self.policy = policy_for(server_args)
            self.block = StepWidths(self.draft_runner).maximum  # B: the draft runner's TARGET_VERIFY width
            self.width = StepWidths(target_worker.model_runner).maximum  # W: the target's
            config = parse_draft_config(draft_hf_config=self.draft_runner.model_config.hf_config)
            self.mask_token_id = int(config.mask_token_id)
            self.draft_model = self.draft_runner.model
            target = target_worker.model_runner.model
            self.embedding = target.get_input_embeddings()
            self.lm_head = target.lm_head
            self.device = target_worker.model_runner.device
            self.vocab_size = target_worker.model_runner.model_config.vocab_size
            self.overlap = overlap_scheduled(server_args)
            self._in_flight = steps_in_flight(server_args)
            self.contained = Containment(self.policy, self.policy.max_faulted_steps)
            self._contract = contract()
            self._verify_chains = ChainVerifier(self._contract, getattr(server_args, "sampling_backend", None))
            self._deterministic = bool(getattr(server_args, "enable_deterministic_inference", False))
            self._relay = None
            self._unchecked: List[Any] = []  # each step's count of drafts out of the vocabulary, read once passed
            self._counts = timer_for(self.device)  # keeps such a count on its way to the host without a wait
            self.fused = self._fused_kv()
            self.block_input = DFlashVerifyInput(  # what the draft runner's TARGET_VERIFY is laid out by (B per request)
                draft_token=torch.empty((0,), dtype=torch.long, device=self.device),
                positions=torch.empty((0,), dtype=torch.int64, device=self.device),
                draft_token_num=self.block, custom_mask=None, capture_hidden_mode=CaptureHiddenMode.NULL)

        def drafts(self, batch, hidden):
            """``B - 1`` drafts per request ``(bs, B - 1)`` int64, from the draft's hidden
            states at the block's positions 1.. ``(bs, B - 1, hidden_size)``, rows in
            ``batch.reqs``' order: :meth:`greedy_drafts` by default. A drafter that draws
            its drafts returns ``(drafts, probs)``, ``probs`` ``(bs, B - 1, vocab)`` the
            proposal each was drawn from."""
            return self.greedy_drafts(hidden)

        def greedy_drafts(self, hidden):
            """The target's LM head over ``hidden`` ``(bs, n, hidden_size)``, greedy:
            ``(bs, n)`` token ids (DFLASH's greedy draft sampler)."""
            bs, n = hidden.shape[0], hidden.shape[1]
            weight = self.lm_head.weight
            shard = getattr(self.lm_head, "shard_indices", None)
            vocab = int(shard.num_org_elements) if shard is not None else weight.shape[0]
            logits = torch.matmul(hidden.reshape(bs * n, -1).to(weight.dtype), weight[:vocab].T)
            return torch.max(logits, dim=-1)[1].view(bs, n)

        def refusal(self, req) -> Optional[str]:
            """Why this worker cannot serve ``req`` exactly (refused at its prefill), or None:
            what the release cannot serve (:func:`~sglang_spec_plugins.engine.request_kinds.refusal`)."""
            return refusal(req, self.policy.algorithm, self._contract, self._deterministic)

        def _fused_kv(self):
            """SGLang's fused (Triton) context-KV writer for the draft's layers, where
            they qualify as DFLASH requires (fused QKV, unit K/V scales, neox RoPE); else None."""
            layers = self.draft_model.layers
            if not layers or not getattr(self.draft_model, "supports_fused_context_kv", True):
                return None
            for layer in layers:
                attn = layer.self_attn
                if not can_fuse_qkv(attn.qkv_proj)[0] or not getattr(attn.rotary_emb, "is_neox_style", True):
                    return None
                scales = (getattr(attn.attn, "k_scale", None), getattr(attn.attn, "v_scale", None))
                if any(s is not None and float(s) != 1.0 for s in scales):
                    return None
            first = layers[0].self_attn
            return fused_kv_helper(layers=layers, rotary_emb=first.rotary_emb, num_kv_heads=first.num_kv_heads,
                                   head_dim=first.head_dim, device=self.device,
                                   max_position_hint=self.target_worker.model_runner.model_config.context_len + self.block)

        def forward_batch_generation(self, batch, on_publish=None, **kwargs):
            if self._relay is None:
                self._relay = StepRelay(batch.req_to_token_pool.req_to_token.shape[0], self.width, self.device)
            if batch.forward_mode.is_idle():
                result = idle_result(self.device, self.width, self.overlap)
                if on_publish is not None:
                    on_publish(result.new_seq_lens)
                return result
            if batch.forward_mode.is_extend() or getattr(batch, "is_extend_in_batch", False):
                return self._prefill(batch, on_publish)
            return self._decode(batch, on_publish)

        def _refusal(self, req) -> Optional[str]:
            base = functools.partial(DraftBlockSpecWorker.refusal, self)
            return base(req) if type(self).refusal is DraftBlockSpecWorker.refusal else self.contained.refusal(self.refusal, base, req)

        def _prefill(self, batch, on_publish):
            self.contained.begin()
            refuse_unservable(batch, self._refusal)
            self.contained.end()
            out = self.forward_target(batch, CaptureHiddenMode.FULL)
            new_seq_lens = batch.seq_lens.clone()
            if on_publish is not None:
                on_publish(new_seq_lens)
            positions = torch.cat([torch.arange(start, start + length, dtype=torch.int64)
                                   for start, length in zip(batch.prefix_lens, batch.extend_lens)]).to(self.device, non_blocking=True)
            self._write_context_kv(out.logits_output.hidden_states, batch.out_cache_loc.to(torch.int64), positions)
            out.logits_output.hidden_states = None
            first = out.next_token_ids.unsqueeze(1)
            accept_lens = torch.ones(len(batch.reqs), dtype=torch.int32, device=first.device)
            self._relay.keep(batch.req_pool_indices, first, accept_lens)
            return step_result(out.logits_output, first, accept_lens, new_seq_lens, out.can_run_cuda_graph, self.width,
                               self.overlap)

        def _proposed(self, batch, root, hidden):
            """``(drafts (bs, W - 1), probs or None)``: the drafter's, checked, or the root repeated on a fault."""
            bs, count = root.shape[0], self.width - 1
            filler = (root.unsqueeze(1).expand(bs, count), None)
            if hidden is None:
                return filler
            found = self.contained.call("drafts(batch, hidden)", self.drafts, batch, hidden)
            if found is FAULT:
                return filler
            tokens, probs = found if isinstance(found, tuple) and len(found) == 2 else (found, None)
            problem = _tensor_problem(tokens, bs, count, 2, "drafts", True, self.device)
            if problem is None and probs is not None:
                problem = _tensor_problem(probs, bs, count, 3, "probs", False, self.device)
            if problem is not None:
                self.contained.fault("drafts(batch, hidden)", problem)
                return filler
            tokens = tokens[:, :count].to(torch.int64)
            inside = (tokens >= 0) & (tokens < self.vocab_size)
            self._unchecked.append(self._counts.keep((~inside).sum()))  # read at a later step: no wait here
            tokens = torch.where(inside, tokens, root.unsqueeze(1))
            return tokens, (None if probs is None or count == 0 else probs[:, :count].float())

        def _decode(self, batch, on_publish):
            bs, width = len(batch.reqs), self.width
            self.contained.begin()
            while len(self._unchecked) > self._in_flight:
                if int(self._unchecked.pop(0)):
                    self.contained.fault("drafts(batch, hidden)", f"returned token ids outside [0, {self.vocab_size}) "
                                         "in an earlier step (they were verified as the root repeated)")
            with sync_check(self.device):
                root = self._relay.roots(batch.req_pool_indices)
                positions = verify_positions(batch.seq_lens, self.block)
                slots = cache_locations(batch.req_to_token_pool.req_to_token, batch.req_pool_indices, positions)
                block = torch.full((bs, self.block), self.mask_token_id, dtype=torch.int64, device=self.device)
                block[:, 0] = root
            drafting = width > 1 and not self.contained.off
            hidden = self._draft_hidden(batch, block, positions, slots) if drafting else None  # SGLang's forward
            with sync_check(self.device):
                drafted, draft_probs = self._proposed(batch, root, hidden)
                chain = torch.cat([root.unsqueeze(1), drafted], dim=1)

            outputs = host_chains = None
            if any(needs_host_tokens(req) for req in batch.reqs):
                with allowed_sync():  # penalties and grammars judge on the host: the step before's tokens, the chain
                    missing = self._relay.in_flight(batch)
                    tails = StepRelay.tails(self._relay.read(batch.req_pool_indices), missing) if any(missing) \
                        else [[]] * bs
                    outputs = [[*req.output_ids, *tail] for req, tail in zip(batch.reqs, tails)]
                    host_chains = (chain.tolist() if any(getattr(r, "grammar", None) is not None for r in batch.reqs)
                                   else None)
            with sync_check(self.device):
                batch.out_cache_loc = slots[:, :width].flatten()
                batch.input_ids = chain.flatten()
                batch.forward_mode = ForwardMode.TARGET_VERIFY
                batch.spec_info = DFlashVerifyInput(draft_token=batch.input_ids,
                                                    positions=positions[:, :width].flatten(), draft_token_num=width,
                                                    custom_mask=None, capture_hidden_mode=CaptureHiddenMode.FULL)
            out = self.forward_target(batch, is_verify=True)
            with sync_check(self.device):
                logits = out.logits_output
                hidden_states, logits.hidden_states = logits.hidden_states, None
                rows, commit = self._verify_chains(batch, logits, chain, outputs, host_chains, draft_probs)
                new_seq_lens = batch.seq_lens + commit.to(batch.seq_lens.dtype)
                if on_publish is not None:
                    on_publish(new_seq_lens)
                self._write_context_kv(hidden_states, slots[:, :width].flatten(), positions[:, :width].flatten())
                self._relay.keep(batch.req_pool_indices, rows, commit)
            self.contained.end()
            batch.forward_mode = ForwardMode.DECODE
            return step_result(logits, rows, commit, new_seq_lens, out.can_run_cuda_graph, width, self.overlap)

        def _draft_hidden(self, batch, block, positions, slots):
            """The draft's hidden states at the block's positions 1.. ``(bs, B - 1, hidden_size)``:
            one TARGET_VERIFY forward of the block on the draft runner."""
            bs = block.shape[0]
            host_lens = (batch.seq_lens_cpu if getattr(batch, "seq_lens_cpu", None) is not None
                         else batch.seq_lens.cpu()).to(torch.int32) + self.block  # a host bound of what is read
            forward_batch = ForwardBatch(
                forward_mode=ForwardMode.TARGET_VERIFY, batch_size=bs, input_ids=block.flatten(),
                req_pool_indices=batch.req_pool_indices, seq_lens=batch.seq_lens, out_cache_loc=slots.flatten(),
                seq_lens_sum=int(host_lens.sum()), seq_lens_cpu=host_lens, positions=positions.flatten(),
                input_embeds=self.embedding(block).view(bs * self.block, -1),
                spec_algorithm=self.draft_runner.spec_algorithm, spec_info=self.block_input,
                capture_hidden_mode=CaptureHiddenMode.NULL)
            with torch.inference_mode():
                hidden = self.draft_runner.forward(forward_batch).logits_output.hidden_states
            return hidden.view(bs, self.block, -1)[:, 1:, :]

        def _write_context_kv(self, target_hidden, cache_loc, positions):
            """The draft's K/V at ``cache_loc`` for context tokens at ``positions``,
            from the target's captured hidden states of them (``project_target_hidden``,
            then each draft layer's K/V projection, K norm and RoPE: SGLang's
            DFlash draft model's own methods, or its fused writer)."""
            if target_hidden is None or target_hidden.numel() == 0:
                return
            pool = self.draft_runner.token_to_kv_pool
            model = self.draft_model
            with torch.inference_mode():
                context = model.project_target_hidden(target_hidden)
                if self.fused is not None:
                    def write(index, k, v):
                        attn = model.layers[index].self_attn.attn
                        pool.set_kv_buffer(attn, cache_loc, k, v, attn.k_scale, attn.v_scale)

                    self.fused.materialize(ctx_hidden=context, positions=positions, write_layer_kv=write)
                    return
                prepare = getattr(model, "prepare_context_hidden_for_kv", None)  # 0.5.16+
                for layer in model.layers:
                    attn = layer.self_attn
                    k, v = attn.kv_proj_only(prepare(layer, context) if prepare is not None else context)
                    k = attn.apply_k_rope(positions, attn.apply_k_norm(k))
                    pool.set_kv_buffer(attn.attn, cache_loc, k.view(-1, attn.num_kv_heads, attn.head_dim),
                                       v.view(-1, attn.num_kv_heads, attn.head_dim), attn.attn.k_scale,
                                       attn.attn.v_scale)

    return DraftBlockSpecWorker


def _tensor_problem(value: Any, rows: int, columns: int, dims: int, name: str, integer: bool,
                    device: Any) -> Optional[str]:
    """What is wrong with a drafter's ``value`` as a ``dims``-dimensional tensor of ``rows``
    rows and at least ``columns`` columns, of an integer (or floating) dtype, on
    ``device``'s kind of device; None when nothing is."""
    import torch

    if not isinstance(value, torch.Tensor):
        return f"returned {name} as a {type(value).__name__}, not a tensor"
    if value.dim() != dims or value.shape[0] != rows or value.shape[1] < columns:
        return f"returned {name} of shape {tuple(value.shape)}, not ({rows}, >= {columns}{', vocab' if dims == 3 else ''})"
    if integer == value.dtype.is_floating_point or value.dtype == torch.bool:
        return f"returned {name} of dtype {value.dtype}, not {'an integer' if integer else 'a floating'} dtype"
    if value.device.type != torch.device(device).type:
        return f"returned {name} on {value.device}, not {device}"
    return None
