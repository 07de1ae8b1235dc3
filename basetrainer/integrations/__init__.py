"""Outside engines that run basetrainer's training: Ray Train (:mod:`.ray`).

They sit above the engine and import it; nothing in the engine imports them. Each library is an extra,
imported only when its integration is used.
"""
