"""bench/images.py's HTTP arm in its markdown report: speed against the engine alone with the answers'
check, then where the CPU went (bench/lib/image_http.py measures; this writes)."""

from __future__ import annotations

import statistics


def _median_cores(row: dict, role: str) -> float:
    return statistics.median(cpu[role] for cpu in row["cpu"])


def http_tables(rows: list[dict], args, target: float) -> list[str]:
    from bench.lib.image_http import ratios

    if not rows:
        return []
    width, height = args.http_size
    sizes = "; ".join(f"{image_format} files of {size / 1024:,.0f} KB on average"
                      for image_format, size in sorted(rows[0]["file_bytes"].items()))
    lines = ["", "## Over HTTP: many clients sending base64 images, against the engine alone", "",
             (f"- the server with its default flags (`rose-embed serve --model CKPT`, the CPU named on a CPU run); "
              f"{args.http_distinct} distinct photo-like images of {width}x{height} (bench/lib/photos.py; {sizes}), "
              f"sent over and over as /v1/embeddings `image_url` items with base64 data: URIs, in requests of 1 to "
              f"{args.http_request_images} images (seeded), answers {args.http_answer_formats.replace(',', ' or ')}; "
              f"{args.http_clients} connections in {args.http_procs} client processes, all started at one instant; "
              f"{args.http_rounds} rounds, each timing the engine alone and HTTP in turn (rotated)"),
             ("- the engine alone: the same images preprocessed beforehand, in the queue's default batches (the batch "
              "column), in this process; HTTP's rate reads the steady window (every client busy, only what was "
              "answered inside it), the whole round where a round had none; every answer checked against the "
              "engine's vector for its image"),
             "",
             ("| shape | dtype | images a round | batch | engine alone images/s | HTTP images/s | HTTP / engine "
              "(median of rounds) | per round | target | answers checked | off (least cosine, bar) | "
              "failed requests |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        per_round, basis = ratios(r)
        ratio = statistics.median(per_round)
        windows = [w for w in r["window_rates"] if w is not None] if basis == "steady window" else r["round_rates"]
        verdict = f">= {target} " + ("MET" if ratio >= target else "NOT MET")
        if r["failures"]:
            verdict = "not counted: FAILED answers or requests"
        engine_rate = r["images"] / statistics.median(r["engine_seconds"])
        lines.append(f"| {r['shape']} | {r['dtype']} | {r['images']:,} | {r['batch']} | {engine_rate:,.1f} | "
                     f"{statistics.median(windows):,.1f} | {ratio:.3f} ({basis}) | "
                     f"{', '.join(f'{x:.2f}' for x in per_round)} | {verdict} | {r['checked']:,} | "
                     f"{r['mismatches']} ({r['worst']:.6f}, {r['min_cosine']}) | {len(r['failures'])} |")
    lines += ["", ("Where the CPU went over the same windows (cores busy on average, median of the rounds; "
                   "bench/lib/server_cpu.py): the front ends decode, resize and normalise the images; the front "
                   "ends' CPU per image at the engine alone's rate is the cores they would need to keep up with it."),
              "",
              ("| shape | front ends | front ends: cores | front ends: CPU ms per image | cores needed at the "
               "engine's rate | engines: cores | other server processes: cores | clients: cores (busiest "
               "process, share of a core) | machine: cores busy of all |"),
              "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        per_round, basis = ratios(r)
        rates = list(r["window_rates"]) if basis == "steady window" else r["round_rates"]
        per_image = statistics.median(cpu["front ends"] / rate for cpu, rate in zip(r["cpu"], rates))
        engine_rate = r["images"] / statistics.median(r["engine_seconds"])
        shares = r["client_shares"]
        lines.append(f"| {r['shape']} | {r['front_ends']} | {_median_cores(r, 'front ends'):.2f} | "
                     f"{1000 * per_image:.2f} | {per_image * engine_rate:.1f} | {_median_cores(r, 'engines'):.2f} | "
                     f"{_median_cores(r, 'other'):.2f} | {sum(shares) / args.http_rounds:.2f} ({max(shares):.1%}) | "
                     f"{_median_cores(r, 'machine'):.2f} of {r['cores']} |")
    lines.append("")
    for r in rows:
        lines.append(f"- {r['shape']}: server flags `{' '.join(r['flags'])}`")
        lines += [f"  - failed: {line}" for line in r["failures"][:5]]
    return lines
