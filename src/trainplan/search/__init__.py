"""Layout search with priorities (issue 5): `search(Query(...)) -> SearchResult`.

    from trainplan.search import Query, search
    result = search(Query(model, (find_node("ml.p6-b200.48xlarge"),), max_nodes=64))
    result.chosen.layout, result.reasons, result.pareto

The evaluator is a parameter (`search(q, evaluator=...)`); the default is trainplan's cost model.
"""

from trainplan.search.candidate import Candidate, Metrics
from trainplan.search.evaluator import Counting, Evaluator, model_evaluator
from trainplan.search.objectives import OBJECTIVES, objective
from trainplan.search.query import BatchSpec, Query, parse_batch
from trainplan.search.result import NoRunnablePlan, SearchResult, search

__all__ = [
    "OBJECTIVES", "BatchSpec", "Candidate", "Counting", "Evaluator", "Metrics", "NoRunnablePlan", "Query",
    "SearchResult", "model_evaluator", "objective", "parse_batch", "search",
]
