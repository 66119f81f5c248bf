/// The introspection data each object answers `org.freedesktop.DBus.Introspectable.Introspect`
/// with: the specification's interfaces (as oo7's org.freedesktop.Secrets.xml gives them), the
/// standard ones, and the object's children.
enum Introspection {
    static let serviceInterface = "org.freedesktop.Secret.Service"
    static let collectionInterface = "org.freedesktop.Secret.Collection"
    static let itemInterface = "org.freedesktop.Secret.Item"
    static let sessionInterface = "org.freedesktop.Secret.Session"
    static let promptInterface = "org.freedesktop.Secret.Prompt"
    /// The Secret portal's backend interface (``SecretPortalBackend``).
    static let portalInterface = "org.freedesktop.impl.portal.Secret"
    static let propertiesInterface = "org.freedesktop.DBus.Properties"
    static let introspectableInterface = "org.freedesktop.DBus.Introspectable"
    static let peerInterface = "org.freedesktop.DBus.Peer"

    static func document(interfaces: [String], children: [String]) -> String {
        var xml = """
            <!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
            <node>
            \(standard)
            """
        for interface in interfaces { xml += definitions[interface] ?? "" }
        for child in children { xml += "  <node name=\"\(child)\"/>\n" }
        return xml + "</node>\n"
    }

    private static let standard = """
          <interface name="org.freedesktop.DBus.Introspectable">
            <method name="Introspect"><arg name="xml_data" type="s" direction="out"/></method>
          </interface>
          <interface name="org.freedesktop.DBus.Peer">
            <method name="Ping"/>
            <method name="GetMachineId"><arg name="machine_uuid" type="s" direction="out"/></method>
          </interface>
          <interface name="org.freedesktop.DBus.Properties">
            <method name="Get">
              <arg name="interface_name" type="s" direction="in"/><arg name="property_name" type="s" direction="in"/>
              <arg name="value" type="v" direction="out"/>
            </method>
            <method name="GetAll">
              <arg name="interface_name" type="s" direction="in"/><arg name="props" type="a{sv}" direction="out"/>
            </method>
            <method name="Set">
              <arg name="interface_name" type="s" direction="in"/><arg name="property_name" type="s" direction="in"/>
              <arg name="value" type="v" direction="in"/>
            </method>
            <signal name="PropertiesChanged">
              <arg name="interface_name" type="s"/><arg name="changed_properties" type="a{sv}"/>
              <arg name="invalidated_properties" type="as"/>
            </signal>
          </interface>

        """

    private static let definitions: [String: String] = [
        serviceInterface: """
          <interface name="org.freedesktop.Secret.Service">
            <method name="OpenSession">
              <arg name="algorithm" type="s" direction="in"/><arg name="input" type="v" direction="in"/>
              <arg name="output" type="v" direction="out"/><arg name="result" type="o" direction="out"/>
            </method>
            <method name="CreateCollection">
              <arg name="properties" type="a{sv}" direction="in"/><arg name="alias" type="s" direction="in"/>
              <arg name="collection" type="o" direction="out"/><arg name="prompt" type="o" direction="out"/>
            </method>
            <method name="SearchItems">
              <arg name="attributes" type="a{ss}" direction="in"/>
              <arg name="unlocked" type="ao" direction="out"/><arg name="locked" type="ao" direction="out"/>
            </method>
            <method name="Unlock">
              <arg name="objects" type="ao" direction="in"/>
              <arg name="unlocked" type="ao" direction="out"/><arg name="prompt" type="o" direction="out"/>
            </method>
            <method name="Lock">
              <arg name="objects" type="ao" direction="in"/>
              <arg name="locked" type="ao" direction="out"/><arg name="Prompt" type="o" direction="out"/>
            </method>
            <method name="GetSecrets">
              <arg name="items" type="ao" direction="in"/><arg name="session" type="o" direction="in"/>
              <arg name="secrets" type="a{o(oayays)}" direction="out"/>
            </method>
            <method name="ReadAlias">
              <arg name="name" type="s" direction="in"/><arg name="collection" type="o" direction="out"/>
            </method>
            <method name="SetAlias">
              <arg name="name" type="s" direction="in"/><arg name="collection" type="o" direction="in"/>
            </method>
            <property name="Collections" type="ao" access="read"/>
            <signal name="CollectionCreated"><arg name="collection" type="o"/></signal>
            <signal name="CollectionDeleted"><arg name="collection" type="o"/></signal>
            <signal name="CollectionChanged"><arg name="collection" type="o"/></signal>
          </interface>

        """,
        collectionInterface: """
          <interface name="org.freedesktop.Secret.Collection">
            <method name="Delete"><arg name="prompt" type="o" direction="out"/></method>
            <method name="SearchItems">
              <arg name="attributes" type="a{ss}" direction="in"/><arg name="results" type="ao" direction="out"/>
            </method>
            <method name="CreateItem">
              <arg name="properties" type="a{sv}" direction="in"/><arg name="secret" type="(oayays)" direction="in"/>
              <arg name="replace" type="b" direction="in"/>
              <arg name="item" type="o" direction="out"/><arg name="prompt" type="o" direction="out"/>
            </method>
            <property name="Items" type="ao" access="read"/>
            <property name="Label" type="s" access="readwrite"/>
            <property name="Locked" type="b" access="read"/>
            <property name="Created" type="t" access="read"/>
            <property name="Modified" type="t" access="read"/>
            <signal name="ItemCreated"><arg name="item" type="o"/></signal>
            <signal name="ItemDeleted"><arg name="item" type="o"/></signal>
            <signal name="ItemChanged"><arg name="item" type="o"/></signal>
          </interface>

        """,
        itemInterface: """
          <interface name="org.freedesktop.Secret.Item">
            <method name="Delete"><arg name="Prompt" type="o" direction="out"/></method>
            <method name="GetSecret">
              <arg name="session" type="o" direction="in"/><arg name="secret" type="(oayays)" direction="out"/>
            </method>
            <method name="SetSecret"><arg name="secret" type="(oayays)" direction="in"/></method>
            <property name="Locked" type="b" access="read"/>
            <property name="Attributes" type="a{ss}" access="readwrite"/>
            <property name="Label" type="s" access="readwrite"/>
            <property name="Type" type="s" access="readwrite"/>
            <property name="Created" type="t" access="read"/>
            <property name="Modified" type="t" access="read"/>
          </interface>

        """,
        portalInterface: """
          <interface name="org.freedesktop.impl.portal.Secret">
            <method name="RetrieveSecret">
              <arg name="handle" type="o" direction="in"/><arg name="app_id" type="s" direction="in"/>
              <arg name="fd" type="h" direction="in"/><arg name="options" type="a{sv}" direction="in"/>
              <arg name="response" type="u" direction="out"/><arg name="results" type="a{sv}" direction="out"/>
            </method>
            <property name="version" type="u" access="read"/>
          </interface>

        """,
        sessionInterface: """
          <interface name="org.freedesktop.Secret.Session">
            <method name="Close"/>
          </interface>

        """,
        promptInterface: """
          <interface name="org.freedesktop.Secret.Prompt">
            <method name="Prompt"><arg name="window-id" type="s" direction="in"/></method>
            <method name="Dismiss"/>
            <signal name="Completed"><arg name="dismissed" type="b"/><arg name="result" type="v"/></signal>
          </interface>

        """,
    ]
}
