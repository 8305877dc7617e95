"""Analyses: what a study asks of a run beyond its task's metrics and baselines, outside the training path. The rivals
of the node and the relation task (``node_rival``, ``relation_rival``, with the 2D repair of ``dimension_repair``),
the destroyed sets recognised per flip fraction (``destroyed_sets``), the recall per kind and against each defect's
realised size (``kind_breakdown``), the sets no method can call (``ceiling``), detection against a defect's exact size
at a fixed false-alarm rate (``sensitivity``) and their figures (``figures``), each a callback on ``base``'s
``Analysis`` where a run computes it. A run loads one only where its config switches it on (its ``callbacks:``, its
task's declared rivals and analyses, its data's flip-fraction range): the default job loads none."""
