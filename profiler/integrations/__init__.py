"""Adapters from frameworks and unmodified scripts to the Session.

    script.py     `profiler run SCRIPT.py` / `-m MODULE`: the script as __main__ under a Session
    torch.py      optimizer steps and DataLoader passes (track(session))
    keras.py      ProfilerCallback(session) for Model.fit
    lightning.py  ProfilerCallback(session) for Trainer
    functions.py  --epoch-fn / --step-fn
    windows.py    fixed time windows when nothing marks epochs
    marks.py      one Session's epochs and steps from all of these
    gc_policy.py  --gc-policy
    imports.py    hooks installed when the script imports a framework
    pytest_plugin.py  the CI guard (@pytest.mark.profile_epochs, profile_session)

Nothing here is imported by `import profiler`; each module imports its framework itself.
"""
