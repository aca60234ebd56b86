"""Each lesson's results, one module a lesson, named as the lesson's capture and render modules
are (`capture/lessons/vjp.py` computes `records/lessons/vjp.py`, `render/lessons/vjp.py` shows it).
"""
