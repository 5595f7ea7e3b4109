"""The kinds of held call, each with its own rules in its own module, and their registry: a
row's `kind` names its rules (`Ceremony.rules`). A new kind is a module here (a `HeldKind`
subclass and what holds it), its `Ceremony.Kind` value, and its line below."""

from held.kinds import form, input_form, rerun, result, step_up, tool_call

KINDS = {
    module.RULES.kind: module.RULES
    for module in (tool_call, step_up, form, input_form, result, rerun)
}
