"""The C-style renderer shared by every target: a lowered kernel graph in, C or OpenCL C source out.

``language`` declares what one C dialect spells (``CStyleLanguage``), ``vectors`` the expressions of values computed
as vector types, ``walk`` the walk over the graph that places and emits them (``render_kernel``), ``chains`` the
kernels that run several graphs in one launch (``render_chain``, ``render_team``).
"""
