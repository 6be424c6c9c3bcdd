"""Collocation modes behind one interface (:class:`~raycolloc.node.modes.base.Mode`): naive
time-slicing, MPS and MIG, by name in :data:`raycolloc.node.modes.registry.MODES`.

This ``__init__`` imports none of them: Python runs it before any module of the package, so a
package that fills itself from its own modules imports itself in a circle.
"""
