"""The aggregate's statistics: one package under the analyses, importing only numpy, scipy and
:mod:`kvx.aggregate.read`. Where a library computes the quantity, the library computes it.

- :mod:`~kvx.aggregate.stats.inputs`: the argument checks the estimators share;
- :mod:`~kvx.aggregate.stats.intervals`: the one percentile interval (the releases' exact rule);
- :mod:`~kvx.aggregate.stats.paired_tests`: exact McNemar p-values and cutoffs (scipy's binomial);
- :mod:`~kvx.aggregate.stats.contingency`: Pearson's chi-square test of homogeneity (scipy);
- :mod:`~kvx.aggregate.stats.ranks`: Mann-Whitney U, AUROC, stratified AUROC and Spearman's rho (scipy);
- :mod:`~kvx.aggregate.stats.overlap`: the Jaccard overlap of failure sets;
- :mod:`~kvx.aggregate.stats.upgrades`: the reader-upgrade estimators (retention, endpoints, excess
  flips, rescue and damage);
- :mod:`~kvx.aggregate.stats.eiv`: the errors-in-variables correction M*, its correlation and bootstrap;
- :mod:`~kvx.aggregate.stats.agreement`: a binary judge against human labels (accuracy, balanced
  accuracy) and the release's question-clustered bootstrap (TPBench's Answer Equivalence check);
- :mod:`~kvx.aggregate.stats.resampling`: kvx's own seeded resampling streams;
- :mod:`~kvx.aggregate.stats.releases`: the streams that must give a paper's release to the last bit,
  each citing the release file and function it follows.

Undefined values are ``None`` (NaN only where a table column wants it), so a report can say
"undefined" instead of silently propagating NaN. Every random function takes ``seed`` and draws from
``np.random.default_rng(seed)``, so a report is reproducible from its inputs.
"""
