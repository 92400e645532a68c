# Deleting is the one irreversible step, so it is fenced: it exists only in the final phase, it
# needs every verify of the phase to have passed (they are its inputs, and ferry_task.py checks
# them again, as in the Nextflow pipeline), and ferry prune itself refuses beyond
# prune.max_delete (of the whole pass, in every job) unless prune.force is set. The plan cut the
# files to delete into parts, deleted at once; the directories they leave go after all of them.


rule prune:
    input:
        manifest=ferry_run_dir.plan_part("prune", "{part}", RUN),
        verified=all_verify_json,
    output:
        json=records("prune").out,
        bench=records("prune").bench,
    log:
        records("prune").log,
    retries: retries("prune")
    conda:
        "../envs/ferry.yaml"
    threads: threads("prune")
    resources:
        **requests("prune"),
    message:
        message("prune")
    shell:
        task("prune")


rule prune_dirs:
    input:
        pruned=all_prune_json,
        verified=all_verify_json,
    output:
        json=records("prune_dirs").out,
        bench=records("prune_dirs").bench,
    log:
        records("prune_dirs").log,
    retries: retries("prune_dirs")
    conda:
        "../envs/ferry.yaml"
    threads: threads("prune_dirs")
    resources:
        **requests("prune_dirs"),
    message:
        message("prune_dirs")
    shell:
        task("prune_dirs")
