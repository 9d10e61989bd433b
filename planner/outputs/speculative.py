"""The terminal's lines for speculative decoding: what vLLM's SpecDecodingLogging prints (mean acceptance length,
per-position acceptance rate, average draft acceptance rate) and the planner's time shares; and, for a simulation
whose profile has no drafting terms, how far that pricing has been checked."""

from __future__ import annotations

from sim.draft_cost import fitted_terms


def spec_decode_lines(s: dict) -> list[str]:
    """The speculative line of a summary with "spec_decode", and the drafting note where it applies."""
    d = s["spec_decode"]
    per_pos = ", ".join(f"{rate:.3f}" for rate in d["acceptance_rate_per_pos"])
    line = (
        f"Speculative decoding ({d['method']}, k = {d['num_speculative_tokens']}): mean acceptance length"
        f" {d['mean_acceptance_length']:.2f}, per-position acceptance rate {per_pos}, avg draft acceptance rate"
        f" {d['draft_acceptance_rate'] * 100:.1f}%; drafting {d['draft_time_share'] * 100:.1f}% of the step time,"
        f" verifying {d['verify_time_share'] * 100:.1f}% (acceptance: {d['acceptance_source']})"
    )
    simulated_unfitted = s.get("mode") == "simulated" and not drafting_fitted(d["method"], s.get("cost_model") or {})
    return [line, *([f"  {drafting_caveat(d['method'])}"] if simulated_unfitted else [])]


def drafting_fitted(method: str, coefficients: dict) -> bool:
    """Whether the coefficients (CostCoefficients.to_dict(): a term not known is left out) hold the method's fitted
    drafting terms."""
    return all(coefficients.get(term) is not None for term in fitted_terms(method))


def drafting_caveat(method: str) -> str:
    """What a simulation that prices drafting without fitted terms says: against vLLM's published EAGLE-3 runs that
    pricing came out too fast (docs/fidelity.md), so its speculative gain is an upper bound."""
    checked = (
        "against vLLM's published EAGLE and EAGLE-3 runs this pricing is too fast"
        if method in ("eagle", "eagle3")
        else f"no published {method} run checks it (EAGLE's and EAGLE-3's came out too fast)"
    )
    # the live engine builds no MTP modules (docs/speculative-decoding.md), so no calibration can time them
    fit = "no calibration fits MTP drafting yet" if method == "mtp" else "`planner calibrate` on the target fits it"
    return (
        f"drafting priced from the drafter's facts alone (this profile fits no drafting term): {checked}, so read"
        f" the speculative gain as an upper bound (docs/speculative-decoding.md#how-good-it-is; {fit})"
    )
